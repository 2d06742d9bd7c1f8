//! `querygate_audit_otlp_records_total{result}`: what became of the audit records offered
//! to the OTLP export (`audit.sink: otlp`, `audit.otlp`): `exported`, `dropped` (the queue
//! was full, or the process stopped first) or `failed` (refused, or given up after the
//! retries).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::Metrics;
use crate::audit::otel::exporter::{ExportObserver, ExportResult};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ResultLabel {
    result: &'static str,
}

/// Registers the family, each result shown from 0.
pub(super) fn register(registry: &mut Registry) -> Family<ResultLabel, Counter> {
    let family = Family::<ResultLabel, Counter>::default();
    for result in [
        ExportResult::Exported,
        ExportResult::Dropped,
        ExportResult::Failed,
    ] {
        let _ = family.get_or_create(&ResultLabel {
            result: result.as_str(),
        });
    }
    registry.register(
        "querygate_audit_otlp_records",
        "Audit records offered to the OTLP export, by result (exported, dropped, failed)",
        family.clone(),
    );
    family
}

impl ExportObserver for Metrics {
    fn audit_export(&self, result: ExportResult, records: u64) {
        self.audit_export
            .get_or_create(&ResultLabel {
                result: result.as_str(),
            })
            .inc_by(records);
    }
}
