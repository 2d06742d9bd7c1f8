//! The sink that collects the property names of the rows (for schemas that declare none).

use std::borrow::Cow;

use super::binder::CiIndex;
use super::scan::Scanner;
use super::walk::{Pair, RowSink, Walk, key_text};
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
    fn object_row(&mut self, scan: &mut Scanner<'de>, _: bool) -> Walk {
        let mut more = scan.open_object()?;
        while more {
            self.add(&key_text(scan.key()?)?);
            scan.skip_value()?;
            more = scan.next_property()?;
        }
        Ok(())
    }

    fn wants_scalar_rows(&self) -> bool {
        true
    }

    fn scalar_row(&mut self, _: Cow<'de, str>) -> Walk {
        self.add(VALUE_COLUMN);
        Ok(())
    }

    fn pairs_row(&mut self, pairs: &[Pair<'de>]) -> Walk {
        for (key, _) in pairs {
            self.add(key);
        }
        Ok(())
    }
}
