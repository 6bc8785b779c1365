//! A metric family whose rows are encoded in the order given: `prometheus_client`'s `Family`
//! encodes in hash order, which changes from scrape to scrape; these rows come sorted (by
//! tenant, by state, by name), so two scrapes diff line by line.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// One row: its labels (name, value) and its value.
pub(crate) type Row = (Vec<(&'static str, String)>, u64);

/// A counter or gauge family built for one scrape. Without rows it is left out, as an empty
/// `Family` is.
#[derive(Debug)]
pub(crate) struct Sorted {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    rows: Vec<Row>,
}

impl Sorted {
    /// A counter family (the encoder appends `_total`).
    pub(crate) fn counter(name: &'static str, help: &'static str, rows: Vec<Row>) -> Box<Sorted> {
        Box::new(Sorted {
            name,
            help,
            kind: MetricType::Counter,
            rows,
        })
    }

    /// A gauge family.
    pub(crate) fn gauge(name: &'static str, help: &'static str, rows: Vec<Row>) -> Box<Sorted> {
        Box::new(Sorted {
            name,
            help,
            kind: MetricType::Gauge,
            rows,
        })
    }
}

impl Collector for Sorted {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        if self.rows.is_empty() {
            return Ok(());
        }
        // With the final period, as `Registry::register` adds it to the others' help.
        let help = format!("{}.", self.help);
        let mut family = encoder.encode_descriptor(self.name, &help, None, self.kind)?;
        for (labels, value) in &self.rows {
            let mut metric = family.encode_family(labels)?;
            if matches!(self.kind, MetricType::Counter) {
                metric.encode_counter::<NoLabelSet, _, u64>(value, None)?;
            } else {
                metric.encode_gauge(value)?;
            }
        }
        Ok(())
    }
}
