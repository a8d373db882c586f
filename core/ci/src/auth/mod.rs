//! The credentials the services make and open, with no request in sight.
//!
//! - [`sealing`]: encryption at rest for secret values, with a key kept outside the database.
//! - [`token`]: HS256 tokens (personal access tokens, sessions, hook tokens).
//!
//! Where a request carries its token, and the browser sessions built on these, are the
//! server's (`woodlark::auth`).

pub mod sealing;
pub mod token;

pub use woodlark_stdx::{random_bytes, random_secret};
