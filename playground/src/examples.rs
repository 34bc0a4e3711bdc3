//! The page's examples (also the user documentation's examples), each with the steps
//! and nodes it is best seen with. The tests plan every one of them.

use serde::Serialize;

/// One example.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Example {
    pub id: &'static str,
    pub title: &'static str,
    pub manifest: &'static str,
    /// Nodes YAML ("" = no node simulation).
    pub nodes: &'static str,
    pub steps: &'static str,
}

pub const EXAMPLES: &[Example] = &[
    Example {
        id: "zones",
        title: "Three zones: 30% / 50% / rest",
        manifest: include_str!("../examples/zones.yaml"),
        nodes: include_str!("../examples/zones.nodes.yaml"),
        steps: "0,10,4,12",
    },
    Example {
        id: "elastic",
        title: "Elastic: own pool 100, rest elastic",
        manifest: include_str!("../examples/elastic.yaml"),
        nodes: "",
        steps: "80,130,110,90",
    },
    Example {
        id: "percent",
        title: "Percentages 1:1:3",
        manifest: include_str!("../examples/percent.yaml"),
        nodes: "",
        steps: "5,10,3,20",
    },
    Example {
        id: "arch",
        title: "Per-architecture patches",
        manifest: include_str!("../examples/arch.yaml"),
        nodes: "",
        steps: "10,6,12",
    },
    Example {
        id: "min-replicas",
        title: "minReplicas per zone",
        manifest: include_str!("../examples/min-replicas.yaml"),
        nodes: "",
        steps: "4,10,5,3",
    },
    Example {
        id: "adaptive",
        title: "Adaptive rescheduling (zone-a has no nodes)",
        manifest: include_str!("../examples/adaptive.yaml"),
        nodes: include_str!("../examples/adaptive.nodes.yaml"),
        steps: "6,8,4",
    },
];
