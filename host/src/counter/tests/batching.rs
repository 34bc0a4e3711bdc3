//! Batching: what joins a batch, and operations whose waiter gave up.

use super::super::queue::{collect_batch, still_awaited};
use super::super::*;
use super::claim;

fn pending(pod: &str) -> Pending {
    let (reply, _answer) = oneshot::channel();
    Pending {
        work: Work::Op(claim(pod, None)),
        reply: Some(reply),
        since: Instant::now(),
        waited: false,
    }
}

fn pods(batch: &[Pending]) -> Vec<String> {
    let pod = |p: &Pending| match &p.work {
        Work::Op(Op::Claim(c)) => c.pod.name.clone(),
        Work::Op(Op::Release(r)) => r.pod.name.clone(),
        Work::Op(Op::Unclaim(u)) => u.pod.name.clone(),
        other => format!("{other:?}"),
    };
    batch.iter().map(pod).collect()
}

fn policy(window_ms: u64, max_batch: usize) -> BatchPolicy {
    BatchPolicy {
        window: Duration::from_millis(window_ms),
        max_batch,
    }
}

/// A queue holding `queued`, with a sender kept open (as a live queue has).
fn queue(
    queued: &[&str],
) -> (
    mpsc::UnboundedSender<Pending>,
    mpsc::UnboundedReceiver<Pending>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    for pod in queued {
        tx.send(pending(pod)).unwrap();
    }
    (tx, rx)
}

#[test]
fn operations_whose_waiter_gave_up_are_dropped() {
    let (reply, answer) = oneshot::channel();
    let waited = Pending {
        work: Work::Op(claim("waited", None)),
        reply: Some(reply),
        since: Instant::now(),
        waited: false,
    };
    let (reply, gone) = oneshot::channel();
    let abandoned = Pending {
        work: Work::Op(claim("abandoned", None)),
        reply: Some(reply),
        since: Instant::now(),
        waited: false,
    };
    drop(gone);
    let own = internal(Work::Settle(vec![]));
    let (kept, dropped) = still_awaited(vec![waited, abandoned, own]);
    assert_eq!(
        (pods(&kept), dropped),
        (vec!["waited".to_string(), "Settle([])".to_string()], 1)
    );
    drop(answer);
}

#[tokio::test(start_paused = true)]
async fn without_a_window_a_batch_takes_what_is_queued_and_waits_for_nothing() {
    let (_tx, mut rx) = queue(&["p2", "p3"]);
    let started = tokio::time::Instant::now();
    let batch = collect_batch(pending("p1"), &mut rx, policy(0, 512)).await;
    assert_eq!(pods(&batch), ["p1", "p2", "p3"]);
    let (_tx, mut rx) = queue(&[]);
    let batch = collect_batch(pending("alone"), &mut rx, policy(0, 512)).await;
    assert_eq!(pods(&batch), ["alone"]);
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn max_batch_caps_a_batch_and_one_writes_every_operation_alone() {
    let (_tx, mut rx) = queue(&["p2", "p3", "p4"]);
    assert_eq!(
        pods(&collect_batch(pending("p1"), &mut rx, policy(0, 1)).await),
        ["p1"]
    );
    assert_eq!(
        pods(&collect_batch(pending("p2'"), &mut rx, policy(5, 2)).await),
        ["p2'", "p2"]
    );
    assert_eq!(
        pods(&collect_batch(pending("p5"), &mut rx, policy(0, 512)).await),
        ["p5", "p3", "p4"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_window_collects_what_arrives_before_it_closes() {
    let (tx, mut rx) = queue(&[]);
    let late = tx.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1)).await;
        tx.send(pending("in-window")).unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        late.send(pending("next-batch")).unwrap();
    });
    let started = tokio::time::Instant::now();
    let batch = collect_batch(pending("p1"), &mut rx, policy(2, 512)).await;
    assert_eq!(pods(&batch), ["p1", "in-window"]);
    assert_eq!(started.elapsed(), Duration::from_millis(2));
    let next = rx.recv().await.unwrap();
    assert_eq!(pods(&[next]), ["next-batch"]);
}
