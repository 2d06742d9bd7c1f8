//! Retention cuts under `verify --database`: what `querygate audit maintain` removed
//! (`audit_retention_cuts`, one row per removed partition and stream: the first and last
//! seq the partition held, how many records, the hash of the last one, MACed under the
//! audit key).
//!
//! A partition holds a day of calls' starts, so it holds most of a stream's seqs of that day
//! in one run, and a few records out of it (a call that started before midnight and ended
//! after has its outcome, stamped with its start, among the next day's seqs). A stream's
//! missing seqs are therefore accepted when every one lies within a cut's first..last, and
//! when, over the whole stream, as many are missing as the cuts removed: a record deleted
//! from a kept partition (even among a cut's seqs) makes one more missing than removed, and
//! is a break. Where a gap ends at a cut's last seq, the next record must link to that
//! cut's hash.

use std::collections::BTreeMap;

use futures::TryStreamExt as _;
use sqlx_core::query_as::query_as;
use sqlx_postgres::{PgPool, Postgres};

use super::super::anchor::{MacKey, same_mac};
use super::super::partitions::cut_fields;

/// One row of `audit_retention_cuts`.
#[derive(Clone, Debug)]
struct Cut {
    partition: String,
    first: u64,
    last: u64,
    hash: String,
    records: u64,
}

/// Every cut, per stream, and the seqs found missing so far.
#[derive(Debug, Default)]
pub(super) struct Cuts {
    streams: BTreeMap<String, Vec<Cut>>,
    missing: BTreeMap<String, u64>,
}

type CutRow = (
    String,
    String,
    String,
    i64,
    i64,
    String,
    i64,
    String,
    Option<String>,
);

impl Cuts {
    /// Reads the cuts; with `key`, a cut whose MAC is missing or does not verify is
    /// returned as `Err((location, reason))`: a cut forged to cover a deletion.
    pub(super) async fn load(
        pool: &PgPool,
        key: Option<&MacKey>,
        notes: &mut Vec<String>,
    ) -> Result<Result<Cuts, (String, String)>, sqlx_core::Error> {
        // A database not yet migrated to 0009 has no cuts (and no retention).
        let exists: bool = sqlx_core::query_scalar::query_scalar(
            "SELECT to_regclass('audit_retention_cuts') IS NOT NULL",
        )
        .fetch_one(pool)
        .await?;
        if !exists {
            return Ok(Ok(Cuts::default()));
        }
        let mut rows = query_as::<Postgres, CutRow>(
            "SELECT partition, action, stream, first_seq, last_seq, last_hash, records, \
                    cut_at, mac \
             FROM audit_retention_cuts ORDER BY id",
        )
        .fetch(pool);
        let mut cuts = Cuts::default();
        let mut unanchored = 0u64;
        while let Some((partition, action, stream, first, last, hash, records, cut_at, mac)) =
            rows.try_next().await?
        {
            let location = format!("audit_retention_cuts partition {partition} stream {stream}");
            let fields = cut_fields(
                &partition, &action, &stream, first, last, &hash, records, &cut_at,
            );
            let refs: Vec<&str> = fields.iter().map(String::as_str).collect();
            match (key, &mac) {
                (Some(key), Some(mac)) if same_mac(mac, &key.cut_mac(&refs)) => {}
                (Some(_), _) => {
                    return Ok(Err((
                        location,
                        "the retention cut's MAC is missing or does not verify under audit.mac_key_file: forged or edited".to_owned(),
                    )));
                }
                (None, _) => unanchored += 1,
            }
            let (Ok(first), Ok(last), Ok(records)) = (
                u64::try_from(first),
                u64::try_from(last),
                u64::try_from(records),
            ) else {
                return Ok(Err((
                    location,
                    "the retention cut's seqs are negative".to_owned(),
                )));
            };
            cuts.streams.entry(stream).or_default().push(Cut {
                partition,
                first,
                last,
                hash,
                records,
            });
        }
        if unanchored > 0 {
            notes.push(format!(
                "{unanchored} retention cuts checked without audit.mac_key_file: unanchored"
            ));
        }
        Ok(Ok(cuts))
    }

    /// Whether retention removed anything of `stream`.
    pub(super) fn has(&self, stream: &str) -> bool {
        self.streams.contains_key(stream)
    }

    /// Seqs `from..=to` of `stream` are missing, and `link` is the hash seq `to` had (the
    /// next record's `prev_hash`, or the head's hash): a note when cuts cover them, else
    /// why it breaks.
    pub(super) fn gap(
        &mut self,
        stream: &str,
        from: u64,
        to: u64,
        link: &str,
    ) -> Result<String, String> {
        let cuts = self.streams.get(stream).map(Vec::as_slice).unwrap_or(&[]);
        let mut next = from;
        let mut ranges: Vec<(u64, u64)> = cuts.iter().map(|c| (c.first, c.last)).collect();
        ranges.sort_unstable();
        for (first, last) in ranges {
            if first > next {
                break;
            }
            next = next.max(last.saturating_add(1));
            if next > to {
                break;
            }
        }
        if next <= to {
            return Err(format!(
                "seq {next} of stream {stream} is missing and no retention cut names it: deleted, not removed by retention"
            ));
        }
        if let Some(cut) = cuts.iter().find(|c| c.last == to)
            && cut.hash != link
        {
            return Err(format!(
                "the record after seq {to} of stream {stream} does not link to the last record retention removed (partition {}): replaced",
                cut.partition
            ));
        }
        *self.missing.entry(stream.to_owned()).or_default() += to - from + 1;
        Ok(format!(
            "stream {stream}: seq {from}..{to} removed by retention (audit_retention_cuts)"
        ))
    }

    /// After the walk: per stream, as many seqs missing as the cuts removed; `Err` names
    /// the first stream where more are missing (a record deleted from a kept partition) or
    /// fewer (a cut that names records still there).
    pub(super) fn finish(&self) -> Result<(), (String, String)> {
        for (stream, cuts) in &self.streams {
            let removed: u64 = cuts.iter().map(|c| c.records).sum();
            let missing = self.missing.get(stream).copied().unwrap_or(0);
            if missing != removed {
                return Err((
                    format!("stream {stream}"),
                    format!(
                        "{missing} records of stream {stream} are missing but retention removed {removed}: {}",
                        if missing > removed {
                            "records were deleted from a kept partition"
                        } else {
                            "a retention cut names records that are still there (forged or edited)"
                        }
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(partition: &str, first: u64, last: u64, hash: &str, records: u64) -> Cut {
        Cut {
            partition: partition.into(),
            first,
            last,
            hash: hash.into(),
            records,
        }
    }

    /// Day 1 held seqs 1, 2 and 4 (4 a call that ended after day 2's seq 3 began); day 2
    /// held 3, 5 and 6.
    fn two_days() -> Cuts {
        let mut cuts = Cuts::default();
        cuts.streams.insert(
            "r1".into(),
            vec![cut("p1", 1, 4, "h4", 3), cut("p2", 3, 6, "h6", 3)],
        );
        cuts
    }

    #[test]
    fn gaps_within_cuts_pass_when_as_many_are_missing_as_were_removed() {
        // Both days removed: seqs 1..6 missing, the next record links to seq 6.
        let mut cuts = two_days();
        assert!(cuts.gap("r1", 1, 6, "h6").is_ok());
        assert_eq!(cuts.finish(), Ok(()));
        // Only day 1 removed, its straggler seq 4 among day 2's kept seqs.
        let mut cuts = Cuts::default();
        cuts.streams
            .insert("r1".into(), vec![cut("p1", 1, 4, "h4", 3)]);
        assert!(cuts.gap("r1", 1, 2, "h2").is_ok());
        assert!(cuts.gap("r1", 4, 4, "h4").is_ok());
        assert_eq!(cuts.finish(), Ok(()));
    }

    #[test]
    fn a_seq_outside_every_cut_a_wrong_link_or_a_wrong_count_breaks() {
        let mut cuts = two_days();
        let err = cuts.gap("r1", 1, 7, "h7").unwrap_err();
        assert!(err.contains("seq 7 of stream r1 is missing"), "{err}");
        let err = cuts.gap("r1", 1, 6, "other").unwrap_err();
        assert!(err.contains("does not link"), "{err}");
        // Day 1 removed (3 records), but seqs 1..4 are all missing: seq 3 was deleted.
        let mut cuts = Cuts::default();
        cuts.streams
            .insert("r1".into(), vec![cut("p1", 1, 4, "h4", 3)]);
        assert!(cuts.gap("r1", 1, 4, "h4").is_ok());
        let (location, reason) = cuts.finish().unwrap_err();
        assert_eq!(location, "stream r1");
        assert!(reason.contains("4 records of stream r1 are missing but retention removed 3"));
        // A cut that names records still there.
        let cuts = two_days();
        assert!(cuts.finish().unwrap_err().1.contains("still there"));
        // A stream retention never touched has no cuts.
        let mut cuts = two_days();
        assert!(!cuts.has("r2"));
        assert!(cuts.gap("r2", 1, 1, "h1").is_err());
    }
}
