//! Logging into the server's log; lines are tagged with the plugin instance's name.

use crate::host_api::log::{Level, log};

pub fn trace(message: &str) {
    log(Level::Trace, message)
}
pub fn debug(message: &str) {
    log(Level::Debug, message)
}
pub fn info(message: &str) {
    log(Level::Info, message)
}
pub fn warn(message: &str) {
    log(Level::Warn, message)
}
pub fn error(message: &str) {
    log(Level::Error, message)
}
