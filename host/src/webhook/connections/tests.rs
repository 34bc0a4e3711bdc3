use super::*;

fn ip(last: u8) -> IpAddr {
    IpAddr::from([10, 0, 0, last])
}

/// Past the grace of a connection that has not asked anything yet, so that idle
/// connections may be shed.
async fn settle() {
    tokio::time::sleep(FIRST_GRACE + MIN_IDLE).await;
}

#[tokio::test(start_paused = true)]
async fn a_peer_past_its_limit_gives_up_its_longest_idle_connection() {
    let c = Connections::new(100, 2);
    let (first, second) = (c.new_state(), c.new_state());
    let _a = c.register(ip(1), first.clone());
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _b = c.register(ip(1), second.clone());
    settle().await;
    let _other = c.register(ip(2), c.new_state());
    assert!(
        first.idle_since().is_some(),
        "another peer's connection sheds nothing"
    );
    let third = c.new_state();
    let _c = c.register(ip(1), third.clone());
    assert!(first.idle_since().is_none(), "the longest-idle one is shed");
    assert!(second.idle_since().is_some() && third.idle_since().is_some());
    assert_eq!(c.open(), 4, "the new connection is accepted, not refused");
}

#[tokio::test(start_paused = true)]
async fn a_connection_with_a_request_in_flight_is_never_shed() {
    let c = Connections::new(2, 1);
    let busy = c.new_state();
    let _a = c.register(ip(1), busy.clone());
    busy.handled();
    settle().await;
    // A busy peer is not refused past its limit: an API server's burst is answered whole.
    let also_busy = c.new_state();
    let _b = c.register(ip(1), also_busy.clone());
    also_busy.handled();
    assert_eq!(c.open(), 2);
    assert!(!busy.shed_if_idle(), "busy");
    // At the global limit with nothing idle, room waits for a connection to end.
    let waiting = tokio::time::timeout(Duration::from_secs(5), c.room()).await;
    assert!(waiting.is_err(), "no room while every connection is busy");
    drop(_b);
    tokio::time::timeout(Duration::from_secs(1), c.room())
        .await
        .expect("a closed connection makes room");
}

#[tokio::test(start_paused = true)]
async fn at_the_limit_the_peer_with_the_most_idle_connections_gives_one_up() {
    let c = Connections::new(4, 0);
    let api_server = c.new_state();
    let _api = c.register(ip(1), api_server.clone());
    let hoarded: Vec<_> = (0..3).map(|_| c.new_state()).collect();
    let _held: Vec<_> = hoarded
        .iter()
        .map(|s| c.register(ip(9), s.clone()))
        .collect();
    settle().await;
    tokio::time::timeout(Duration::from_secs(1), c.room())
        .await
        .expect("room by shedding an idle connection");
    assert!(
        api_server.idle_since().is_some(),
        "the peer with one idle connection keeps it"
    );
    assert_eq!(
        hoarded.iter().filter(|s| s.idle_since().is_none()).count(),
        1
    );
    assert!(
        hoarded[0].idle_since().is_none(),
        "the longest-idle of the hoarder's"
    );
}

#[tokio::test(start_paused = true)]
async fn a_new_connection_is_kept_through_its_grace() {
    let c = Connections::new(1, 0);
    let fresh = c.new_state();
    let _a = c.register(ip(1), fresh.clone());
    let started = Instant::now();
    tokio::time::timeout(FIRST_GRACE * 2, c.room())
        .await
        .expect("room once the connection is past its grace");
    assert!(started.elapsed() >= FIRST_GRACE, "{:?}", started.elapsed());
    assert!(fresh.idle_since().is_none() && fresh.is_shed());
}

#[tokio::test(start_paused = true)]
async fn the_sweep_brings_a_peer_back_to_its_limit_without_a_new_connection() {
    let c = Connections::new(100, 3);
    let states: Vec<_> = (0..10).map(|_| c.new_state()).collect();
    let _held: Vec<_> = states
        .iter()
        .map(|s| c.register(ip(7), s.clone()))
        .collect();
    states[9].handled();
    assert_eq!(c.sweep(), 0, "all within their grace");
    settle().await;
    assert_eq!(c.sweep(), 7, "10 open, limit 3");
    assert!(!states[9].is_shed(), "the busy one is kept");
    assert_eq!(states.iter().filter(|s| !s.is_shed()).count(), 3);
    assert_eq!(c.sweep(), 0, "those shed but not yet closed count as gone");
    let _other: Vec<_> = (0..3).map(|_| c.register(ip(8), c.new_state())).collect();
    settle().await;
    assert_eq!(c.sweep(), 0, "a peer at its limit keeps its connections");
}

#[tokio::test(start_paused = true)]
async fn closed_connections_leave_no_trace() {
    let c = Connections::new(1000, 4);
    for i in 0..200u8 {
        drop(c.register(ip(i), c.new_state()));
    }
    assert_eq!(c.open(), 0);
    assert!(c.lock().by_peer.is_empty());
}
