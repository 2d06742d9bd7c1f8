//! The sink that collects the property names of the rows (for schemas that declare none).

use std::borrow::Cow;

use serde::de::{self, IgnoredAny, MapAccess};
use serde_json::value::RawValue;

use super::binder::CiIndex;
use super::walk::{KeyCow, RowSink, Scalar};
use super::{MAX_DISCOVERED_COLUMNS, VALUE_COLUMN};

#[derive(Default)]
pub(super) struct DiscoverSink {
    pub(super) names: CiIndex,
}

impl DiscoverSink {
    fn add(&mut self, name: &str) {
        if self.names.names.len() < MAX_DISCOVERED_COLUMNS && self.names.find(name).is_none() {
            self.names.push(name);
        }
    }
}

impl<'de> RowSink<'de> for DiscoverSink {
    fn map_row<A: MapAccess<'de>>(&mut self, mut map: A, _: bool) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(KeyCow)? {
            self.add(&key);
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }

    fn wants_scalar_rows(&self) -> bool {
        true
    }

    fn scalar_row<E: de::Error>(&mut self, _: Scalar<'_>) -> Result<(), E> {
        self.add(VALUE_COLUMN);
        Ok(())
    }

    fn pairs_row(
        &mut self,
        pairs: &[(Cow<'de, str>, Cow<'de, RawValue>)],
    ) -> serde_json::Result<()> {
        for (key, _) in pairs {
            self.add(key);
        }
        Ok(())
    }
}
