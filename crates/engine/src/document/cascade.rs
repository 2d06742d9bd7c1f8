//! The cascade of StackQL `config` objects a method's settings are looked up in, nearest
//! first: the method's `config`, the resource's, the operation document's and the service
//! document's `x-stackQL-config`, and the provider's `config`.

use serde_json::Value;

/// The `config` objects of one method, each level present or not.
pub(super) struct ConfigCascade<'a> {
    pub(super) method: Option<&'a Value>,
    pub(super) resource: Option<&'a Value>,
    pub(super) operation_doc: Option<&'a Value>,
    pub(super) service_doc: Option<&'a Value>,
    pub(super) provider: Option<&'a Value>,
}

impl<'a> ConfigCascade<'a> {
    /// The levels present, nearest first.
    pub(super) fn levels(&self) -> impl Iterator<Item = &'a Value> + use<'a> {
        [
            self.method,
            self.resource,
            self.operation_doc,
            self.service_doc,
            self.provider,
        ]
        .into_iter()
        .flatten()
    }

    /// The first setting `read` finds, nearest level first.
    pub(super) fn find<T>(&self, read: impl FnMut(&'a Value) -> Option<T>) -> Option<T> {
        self.levels().find_map(read)
    }

    /// [`find`](Self::find) over every level but the provider's.
    pub(super) fn find_below_provider<T>(
        &self,
        read: impl FnMut(&'a Value) -> Option<T>,
    ) -> Option<T> {
        [
            self.method,
            self.resource,
            self.operation_doc,
            self.service_doc,
        ]
        .into_iter()
        .flatten()
        .find_map(read)
    }
}
