//! Metrics as `/metrics` serves them.

use prometheus_client::registry::Registry;

/// The OpenMetrics text exposition of `registry` (empty, with a warning, should encoding
/// fail: a scrape then sees no series rather than an error page).
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, registry) {
        tracing::warn!("encoding metrics: {e}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    #[test]
    fn encodes_the_registry_as_openmetrics_text() {
        let mut registry = Registry::with_prefix("ws");
        let c = Counter::<u64>::default();
        registry.register("writes", "Writes", c.clone());
        c.inc_by(3);
        let text = encode(&registry);
        assert!(text.contains("ws_writes_total 3"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
