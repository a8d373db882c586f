//! The credentials the services make and open, with no request in sight.
//!
//! - [`sealing`]: encryption at rest for secret values, with a key kept outside the database.
//! - [`token`]: HS256 tokens (personal access tokens, sessions, hook tokens).
//! - [`keys`]: the server's ed25519 key pair, claimed once in the database for all replicas.
//!
//! Where a request carries its token, and the browser sessions built on these, are the
//! server's (`woodlark::auth`).

pub mod keys;
pub mod sealing;
pub mod token;

pub use woodlark_stdx::{random_bytes, random_secret};
