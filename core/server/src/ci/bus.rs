//! Live log lines, fanned out to stream readers (`/api/stream/logs`).
//!
//! Lines are published after they are stored, so a reader that catches up from the database
//! and then follows the bus sees every line. A reader that falls behind by more than the
//! channel's capacity loses its place (`Lagged`) and re-reads from the database.

use std::sync::Arc;

use tokio::sync::broadcast;

use crate::store::logs::NewLine;

/// Batches kept for slow readers before they have to re-read from the database.
const CAPACITY: usize = 1024;

pub struct LogBus {
    tx: broadcast::Sender<Arc<Vec<NewLine>>>,
}

impl Default for LogBus {
    fn default() -> Self {
        LogBus {
            tx: broadcast::channel(CAPACITY).0,
        }
    }
}

impl LogBus {
    pub fn publish(&self, lines: &[NewLine]) {
        if !lines.is_empty() {
            // No receiver is not an error: nobody is watching.
            let _ = self.tx.send(Arc::new(lines.to_vec()));
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Vec<NewLine>>> {
        self.tx.subscribe()
    }
}
