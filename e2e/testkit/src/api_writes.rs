//! API writes counted by the API server itself: `apiserver_request_total` scraped before
//! and after a series, by verb, resource and subresource (reads, watches and dry runs
//! left out), so every component's writes are seen, ours and the cluster's alike.

use std::collections::BTreeMap;

/// One kind of write: verb, resource, subresource (empty for the object itself).
pub type WriteKind = (String, String, String);

/// Write requests by kind, as the API server counted them (every response code).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Writes(pub BTreeMap<WriteKind, f64>);

const READS: [&str; 4] = ["GET", "LIST", "WATCH", "CONNECT"];

/// A label's value in a Prometheus label set `a="x",b="y"`.
fn label<'a>(labels: &'a str, name: &str) -> &'a str {
    let key = format!("{name}=\"");
    labels
        .split(',')
        .find_map(|l| l.strip_prefix(key.as_str()))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or("")
}

/// Requests of `verb` on `resource`/`subresource` the API server answered with `code`
/// (e.g. 409 conflicts of status writes), summed over the other labels.
pub fn answered(text: &str, verb: &str, resource: &str, subresource: &str, code: &str) -> f64 {
    text.lines()
        .filter_map(|l| l.strip_prefix("apiserver_request_total{"))
        .filter_map(|rest| rest.rsplit_once("} "))
        .filter(|(labels, _)| {
            label(labels, "verb") == verb
                && label(labels, "resource") == resource
                && label(labels, "subresource") == subresource
                && label(labels, "code") == code
                && label(labels, "dry_run").is_empty()
        })
        .filter_map(|(_, v)| v.trim().parse::<f64>().ok())
        .sum()
}

impl Writes {
    /// The writes in an API server `/metrics` text.
    pub fn from_metrics(text: &str) -> Self {
        let mut out = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once("} ") else {
                continue;
            };
            let verb = label(labels, "verb");
            if READS.contains(&verb) || !label(labels, "dry_run").is_empty() {
                continue;
            }
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            let kind = (
                verb.to_string(),
                label(labels, "resource").to_string(),
                label(labels, "subresource").to_string(),
            );
            *out.entry(kind).or_insert(0.0) += value;
        }
        Writes(out)
    }

    /// The writes made between `earlier` and this reading.
    pub fn since(&self, earlier: &Writes) -> Writes {
        let delta = self
            .0
            .iter()
            .map(|(k, v)| (k.clone(), v - earlier.0.get(k).copied().unwrap_or(0.0)))
            .filter(|(_, v)| *v > 0.0)
            .collect();
        Writes(delta)
    }

    pub fn get(&self, verb: &str, resource: &str, subresource: &str) -> f64 {
        self.0
            .get(&(verb.into(), resource.into(), subresource.into()))
            .copied()
            .unwrap_or(0.0)
    }

    /// Writes that happen whatever the pods do: node and leader-election Lease renewals,
    /// and the namespace and webhook-configuration bookkeeping of the bench itself.
    fn is_background(kind: &WriteKind) -> bool {
        matches!(
            kind.1.as_str(),
            "leases"
                | "namespaces"
                | "mutatingwebhookconfigurations"
                | "validatingwebhookconfigurations"
                | "nodes"
        ) || (kind.0 == "POST" && kind.2.is_empty() && is_series_object(&kind.1))
    }

    /// Writes per pod beyond the pod creates themselves, background left out.
    pub fn beyond_creates(&self) -> f64 {
        self.0
            .iter()
            .filter(|(k, _)| !Self::is_background(k))
            .filter(|(k, _)| !(k.0 == "POST" && k.1 == "pods" && k.2.is_empty()))
            .map(|(_, v)| v)
            .sum::<f64>()
            // An empty f64 sum is -0.0, printed "-0.00".
            + 0.0
    }

    /// `verb resource[/subresource] n` for every kind, background last.
    pub fn describe(&self) -> Vec<(String, f64, bool)> {
        let mut rows: Vec<(String, f64, bool)> = self
            .0
            .iter()
            .map(|(k, v)| {
                let name = match k.2.as_str() {
                    "" => format!("{} {}", k.0, k.1),
                    sub => format!("{} {}/{sub}", k.0, k.1),
                };
                (name, *v, Self::is_background(k))
            })
            .collect();
        rows.sort_by(|a, b| a.2.cmp(&b.2).then(a.0.cmp(&b.0)));
        rows
    }
}

/// Objects a series creates once, not per pod: its WorkloadSpread and workload.
fn is_series_object(resource: &str) -> bool {
    matches!(
        resource,
        "workloadspreads" | "fleets" | "replicasets" | "deployments"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = r#"# HELP apiserver_request_total x
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 99
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PATCH",version="v1"} 1
"#;
    const AFTER: &str = r#"apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 20
apiserver_request_total{code="201",component="apiserver",dry_run="All",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 500
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PATCH",version="v1"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps.kruise.io",resource="workloadspreads",scope="resource",subresource="status",verb="PUT",version="v1beta1"} 2
apiserver_request_total{code="409",component="apiserver",dry_run="",group="apps.kruise.io",resource="workloadspreads",scope="resource",subresource="status",verb="PUT",version="v1beta1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 5
apiserver_request_total{code="201",component="apiserver",dry_run="",group="apps.kruise.io",resource="workloadspreads",scope="resource",subresource="",verb="POST",version="v1beta1"} 1
"#;

    #[test]
    fn counts_writes_by_kind_without_reads_dry_runs_or_background() {
        let delta = Writes::from_metrics(AFTER).since(&Writes::from_metrics(BEFORE));
        assert_eq!(delta.get("POST", "pods", ""), 10.0);
        assert_eq!(delta.get("PATCH", "pods", ""), 3.0);
        assert_eq!(delta.get("PUT", "workloadspreads", "status"), 3.0);
        assert_eq!(delta.get("GET", "pods", ""), 0.0);
        // 3 patches + 3 status writes; the creates and the lease renewals are not counted.
        assert_eq!(delta.beyond_creates(), 6.0);
    }
}
