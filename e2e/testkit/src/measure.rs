//! Reading figures for benchmarks and tests: Prometheus samples from a `/metrics`
//! text, histogram means between two readings, latency percentiles.

use std::time::Duration;

/// Sum of the samples of `name` (exact metric name, any labels).
pub fn sum_metric(text: &str, name: &str) -> f64 {
    sum_metric_with(text, name, "")
}

/// Sum of the samples of `name` whose label set contains `label` (e.g.
/// `endpoint="Mutate"`; empty matches every sample).
pub fn sum_metric_with(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter_map(|l| l.strip_prefix(name))
        .filter(|rest| match rest.strip_prefix('{') {
            Some(labelled) => labelled.split('}').next().unwrap_or("").contains(label),
            None => rest.starts_with(' ') && label.is_empty(),
        })
        .filter_map(|rest| rest.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `_sum` and `_count` of a Prometheus histogram (seconds), one reading.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HistogramReading {
    pub sum: f64,
    pub count: f64,
}

impl HistogramReading {
    /// The reading of `histogram` in `text`, over the label sets containing `label`.
    pub fn from_text(text: &str, histogram: &str, label: &str) -> Self {
        HistogramReading {
            sum: sum_metric_with(text, &format!("{histogram}_sum"), label),
            count: sum_metric_with(text, &format!("{histogram}_count"), label),
        }
    }

    /// Mean of the observations made since `earlier` (zero when there were none).
    pub fn mean_since(self, earlier: HistogramReading) -> Duration {
        let count = self.count - earlier.count;
        if count <= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(((self.sum - earlier.sum) / count).max(0.0))
    }
}

/// Nearest-rank percentiles of one latency series.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Percentiles {
    pub samples: usize,
    pub p50: Duration,
    pub p99: Duration,
}

impl Percentiles {
    pub fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        let rank = |q: f64| (samples.len() as f64 * q).ceil() as usize;
        let at = |q: f64| samples.get(rank(q).saturating_sub(1)).copied();
        Percentiles {
            samples: samples.len(),
            p50: at(0.50).unwrap_or_default(),
            p99: at(0.99).unwrap_or_default(),
        }
    }
}

/// Clock ticks per second of `/proc` CPU times: the kernel's USER_HZ, 100 on every Linux
/// this runs on.
const USER_HZ: f64 = 100.0;

/// CPU time (user + system, seconds) a process has used, from `/proc/<pid>/stat`.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    use anyhow::Context;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start at state (field 3);
    // utime and stime are fields 14 and 15, in clock ticks.
    let after = stat.rsplit_once(')').context("bad stat")?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<f64> {
        Ok(fields.get(i - 3).context("short stat")?.parse::<f64>()?)
    };
    Ok((ticks(14)? + ticks(15)?) / USER_HZ)
}

/// CPU time (seconds) every core of the machine has spent busy so far, every process and
/// the kernel together: the first line of `/proc/stat` (user, nice, system, irq, softirq;
/// not idle, iowait, or steal, the time the hypervisor gave to another guest).
pub fn machine_busy_seconds() -> anyhow::Result<f64> {
    busy_seconds_of(&std::fs::read_to_string("/proc/stat")?)
}

fn busy_seconds_of(stat: &str) -> anyhow::Result<f64> {
    use anyhow::Context;
    let line = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .context("/proc/stat has no cpu line")?;
    let fields: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    // user nice system idle iowait irq softirq steal ...
    let busy = [0, 1, 2, 5, 6]
        .iter()
        .map(|&i| {
            fields
                .get(i)
                .copied()
                .context("short cpu line in /proc/stat")
        })
        .sum::<anyhow::Result<f64>>()?;
    Ok(busy / USER_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_busy_counts_user_nice_system_irq_softirq() {
        let stat = "cpu  100 20 30 9000 40 5 6 700 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(busy_seconds_of(stat).unwrap(), 1.61);
        assert!(busy_seconds_of("cpu0 1 2\n").is_err());
        assert!(busy_seconds_of("cpu  1 2 3\n").is_err());
    }

    #[test]
    fn sums_metric_samples() {
        let text = "# HELP x_total X\nx_total{a=\"1\"} 2\nx_total{a=\"2\"} 3\nx_total_other 9\nx_created 1\n";
        assert_eq!(sum_metric(text, "x_total"), 5.0);
    }

    #[test]
    fn sums_metric_samples_with_a_label() {
        let text = "x_sum{endpoint=\"mutate\",b=\"1\"} 0.5\nx_sum{endpoint=\"mutate\"} 0.25\n\
                    x_sum{endpoint=\"validate\"} 7\nx_sum 100\nx_sum_other{endpoint=\"mutate\"} 9\n";
        assert_eq!(sum_metric_with(text, "x_sum", "endpoint=\"mutate\""), 0.75);
        assert_eq!(sum_metric_with(text, "x_sum", ""), 107.75);
        assert_eq!(sum_metric_with(text, "absent", ""), 0.0);
    }

    #[test]
    fn histogram_mean_since_an_earlier_reading() {
        let before = "h_sum{name=\"w\"} 1.0\nh_count{name=\"w\"} 10\nh_sum{name=\"x\"} 50\nh_count{name=\"x\"} 1\n";
        let after = "h_sum{name=\"w\"} 3.0\nh_count{name=\"w\"} 30\nh_sum{name=\"x\"} 90\nh_count{name=\"x\"} 2\n";
        let reading = |text| HistogramReading::from_text(text, "h", "name=\"w\"");
        assert_eq!(
            reading(before),
            HistogramReading {
                sum: 1.0,
                count: 10.0
            }
        );
        assert_eq!(
            reading(after).mean_since(reading(before)),
            Duration::from_millis(100)
        );
        let none = HistogramReading::default();
        assert_eq!(none.mean_since(none), Duration::ZERO);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let p = Percentiles::of((1..=200).rev().map(Duration::from_millis).collect());
        assert_eq!(p.samples, 200);
        assert_eq!(p.p50, Duration::from_millis(100));
        assert_eq!(p.p99, Duration::from_millis(198));
        let one = Percentiles::of(vec![Duration::from_millis(7)]);
        assert_eq!(
            (one.p50, one.p99),
            (Duration::from_millis(7), Duration::from_millis(7))
        );
        let empty = Percentiles::of(Vec::new());
        assert_eq!(
            (empty.samples, empty.p50, empty.p99),
            (0, Duration::ZERO, Duration::ZERO)
        );
    }
}
