//! Secret backends (`woodlark:plugins/secret-backend`): implement [`SecretBackend`] and call
//! [`secret_backend!`](crate::secret_backend).

use crate::secrets_bindings::exports::woodlark::secrets::secrets as wit;
pub use crate::{PluginError, invalid, unavailable};
pub use wit::{Scope, Secret};

pub trait SecretBackend {
    /// Every secret visible to `scope`.
    fn list_secrets(scope: Scope) -> Result<Vec<Secret>, PluginError>;

    /// One secret by name; the default filters [`SecretBackend::list_secrets`].
    fn get_secret(scope: Scope, name: String) -> Result<Option<Secret>, PluginError> {
        Ok(Self::list_secrets(scope)?
            .into_iter()
            .find(|s| s.name == name))
    }
}

#[doc(hidden)]
pub struct Bridge<T>(std::marker::PhantomData<T>);

impl<T: SecretBackend> wit::Guest for Bridge<T> {
    fn list_secrets(scope: Scope) -> Result<Vec<Secret>, PluginError> {
        T::list_secrets(scope)
    }
    fn get_secret(scope: Scope, name: String) -> Result<Option<Secret>, PluginError> {
        T::get_secret(scope, name)
    }
}

/// Exports a [`SecretBackend`] implementation as the component's `woodlark:secrets/secrets`.
#[macro_export]
macro_rules! secret_backend {
    ($ty:ty) => {
        $crate::__export_world!(secrets, secrets_bindings::__export_secret_backend, $ty);
    };
}
