//! Registry auth (`woodlark:plugins/registry-auth`): implement [`RegistryAuth`] and call
//! [`registry_auth!`](crate::registry_auth).

use crate::registry_bindings::exports::woodlark::registry::auth as wit;
pub use crate::{PluginError, invalid, unavailable};
pub use wit::Credential;

pub trait RegistryAuth {
    /// Credentials for pulling `image` in a pipeline of `repo` (`owner/name`).
    fn credential_for(image: String, repo: String) -> Result<Option<Credential>, PluginError>;
}

#[doc(hidden)]
pub struct Bridge<T>(std::marker::PhantomData<T>);

impl<T: RegistryAuth> wit::Guest for Bridge<T> {
    fn credential_for(image: String, repo: String) -> Result<Option<Credential>, PluginError> {
        T::credential_for(image, repo)
    }
}

/// Exports a [`RegistryAuth`] implementation as the component's `woodlark:registry/auth`.
#[macro_export]
macro_rules! registry_auth {
    ($ty:ty) => {
        $crate::__export_world!(registry, registry_bindings::__export_registry_auth, $ty);
    };
}
