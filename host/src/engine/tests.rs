use super::*;

/// Answers every host call with the payload reversed.
struct Reverse;
impl Capabilities for Reverse {
    fn call(&self, b: &str, n: &str, o: &str, p: &[u8]) -> Result<Vec<u8>, HostCallError> {
        if (b, n, o) != ("b", "n", "op") {
            return Err(HostCallError::Internal(format!(
                "unexpected call {b}/{n}/{o}"
            )));
        }
        Ok(p.iter().rev().copied().collect())
    }
}

const IMPORTS: &str = r#"
  (import "wapc" "__guest_request" (func $guest_request (param i32 i32)))
  (import "wapc" "__guest_response" (func $guest_response (param i32 i32)))
  (import "wapc" "__guest_error" (func $guest_error (param i32 i32)))
  (import "wapc" "__host_call" (func $host_call (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wapc" "__host_response_len" (func $host_response_len (result i32)))
  (import "wapc" "__host_response" (func $host_response (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "bnop")
"#;

fn engine(body: &str, timeout: Duration) -> PolicyEngine {
    let wat = format!("(module {IMPORTS} {body})");
    let wasm = wat::parse_str(&wat).expect("test module");
    let options = EngineOptions {
        timeout,
        max_memory_bytes: 16 << 20,
        ..EngineOptions::default()
    };
    PolicyEngine::new(&wasm, options).expect("compiles")
}

fn call(e: &PolicyEngine, payload: &[u8]) -> Result<Vec<u8>, EvalError> {
    e.call("validate", payload, Arc::new(Reverse))
}

/// Reads the payload to 1024, passes it through the host call, answers the result.
const ECHO_THROUGH_HOST: &str = r#"
  (func (export "__guest_call") (param $op_len i32) (param $len i32) (result i32)
    (call $guest_request (i32.const 512) (i32.const 1024))
    (if (i32.eqz (call $host_call (i32.const 0) (i32.const 1) (i32.const 1) (i32.const 1)
          (i32.const 2) (i32.const 2) (i32.const 1024) (local.get $len)))
      (then (return (i32.const 0))))
    (call $host_response (i32.const 2048))
    (call $guest_response (i32.const 2048) (call $host_response_len))
    (i32.const 1))
"#;

#[test]
fn round_trip_through_a_host_call() {
    let e = engine(ECHO_THROUGH_HOST, Duration::from_secs(2));
    assert_eq!(call(&e, b"abc").unwrap(), b"cba");
    // A fresh instance per call: nothing leaks from the previous one.
    assert_eq!(call(&e, b"xy").unwrap(), b"yx");
}

#[test]
fn pooled_instances_are_reused_cleanly() {
    let wat = format!("(module {IMPORTS} {ECHO_THROUGH_HOST})");
    let wasm = wat::parse_str(&wat).expect("test module");
    let options = EngineOptions {
        max_memory_bytes: 16 << 20,
        pool_instances: 2,
        ..EngineOptions::default()
    };
    let e = PolicyEngine::new(&wasm, options).expect("pooling engine");
    for i in 0..10u8 {
        let payload = [b'a' + i, b'z'];
        assert_eq!(call(&e, &payload).unwrap(), [b'z', b'a' + i]);
    }
}

fn reusing(body: &str, reuse: usize) -> PolicyEngine {
    let wat = format!("(module {IMPORTS} {body})");
    let wasm = wat::parse_str(&wat).expect("test module");
    let options = EngineOptions {
        max_memory_bytes: 64 << 20,
        timeout: Duration::from_millis(300),
        reuse,
        ..EngineOptions::default()
    };
    PolicyEngine::new(&wasm, options).expect("compiles")
}

/// Counts its calls in a global (instance state) and answers the count: a kept
/// instance answers 1, 2, 3…; a fresh one always 1. Payload "loop" runs for ever,
/// "grow" grows the memory by 40 MiB first.
const COUNTING: &str = r#"
  (global $calls (mut i32) (i32.const 0))
  (func (export "__guest_call") (param $op_len i32) (param $len i32) (result i32)
    (call $guest_request (i32.const 512) (i32.const 1024))
    (if (i32.eq (i32.load8_u (i32.const 1024)) (i32.const 108)) ;; 'l'
      (then (loop (br 0))))
    (if (i32.eq (i32.load8_u (i32.const 1024)) (i32.const 103)) ;; 'g'
      (then (drop (memory.grow (i32.const 640)))))
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (i32.store8 (i32.const 2048) (i32.add (i32.const 48) (global.get $calls)))
    (call $guest_response (i32.const 2048) (i32.const 1))
    (i32.const 1))
"#;

/// With reuse the same instance serves evaluation after evaluation (up to the number
/// kept); one that timed out or grew large is not kept; without reuse every
/// evaluation starts fresh.
#[test]
fn instances_are_reused_until_they_fail_or_grow() {
    let e = reusing(COUNTING, 1);
    let answers: Vec<Vec<u8>> = (0..3).map(|_| call(&e, b"x").unwrap()).collect();
    assert_eq!(
        answers,
        [b"1", b"2", b"3"],
        "one kept instance served all three"
    );
    assert_eq!(e.idle_instances(), 1);
    assert!(matches!(call(&e, b"loop"), Err(EvalError::Timeout(_))));
    assert_eq!(
        e.idle_instances(),
        0,
        "an instance that timed out is dropped"
    );
    assert_eq!(call(&e, b"x").unwrap(), b"1", "a fresh one after it");
    assert_eq!(call(&e, b"grow").unwrap(), b"2");
    assert_eq!(e.idle_instances(), 0, "one grown past the limit is dropped");
    assert_eq!(call(&e, b"x").unwrap(), b"1");
    let fresh = reusing(COUNTING, 0);
    for _ in 0..3 {
        assert_eq!(call(&fresh, b"x").unwrap(), b"1");
    }
    assert_eq!(fresh.idle_instances(), 0);
}

/// A kept instance answers host calls with the capabilities of the evaluation it
/// serves, never those of an earlier one.
#[test]
fn a_kept_instance_calls_the_current_capabilities() {
    struct Fixed(&'static [u8]);
    impl Capabilities for Fixed {
        fn call(&self, _: &str, _: &str, _: &str, _: &[u8]) -> Result<Vec<u8>, HostCallError> {
            Ok(self.0.to_vec())
        }
    }
    let e = reusing(ECHO_THROUGH_HOST, 2);
    for answer in [&b"first"[..], b"second", b"third"] {
        let got = e.call("validate", b"p", Arc::new(Fixed(answer))).unwrap();
        assert_eq!(got, answer);
    }
    assert_eq!(e.idle_instances(), 1);
}

#[test]
fn an_endless_loop_times_out_and_the_engine_keeps_working() {
    let e = engine(
        r#"(func (export "__guest_call") (param i32 i32) (result i32)
             (loop (br 0)) (i32.const 1))"#,
        Duration::from_millis(200),
    );
    for _ in 0..2 {
        match call(&e, b"") {
            Err(EvalError::Timeout(d)) => assert_eq!(d, Duration::from_millis(200)),
            other => panic!("expected a timeout, got {other:?}"),
        }
    }
}

#[test]
fn memory_growth_beyond_the_cap_is_refused() {
    // 1 GiB of pages against a 16 MiB cap; the guest reports the refusal.
    let e = engine(
        r#"(data (i32.const 100) "refused")
           (func (export "__guest_call") (param i32 i32) (result i32)
             (if (i32.eq (memory.grow (i32.const 16384)) (i32.const -1))
               (then (call $guest_error (i32.const 100) (i32.const 7)) (return (i32.const 0))))
             (i32.const 1))"#,
        Duration::from_secs(2),
    );
    match call(&e, b"") {
        Err(EvalError::Guest(m)) => assert_eq!(m, "refused"),
        other => panic!("expected the guest to see a refusal, got {other:?}"),
    }
}

#[test]
fn garbage_pointers_trap_cleanly() {
    for (what, body) in [
        (
            "response past memory",
            r#"(func (export "__guest_call") (param i32 i32) (result i32)
                 (call $guest_response (i32.const -16) (i32.const 1000)) (i32.const 1))"#,
        ),
        (
            "huge length",
            r#"(func (export "__guest_call") (param i32 i32) (result i32)
                 (call $guest_error (i32.const 0) (i32.const 2147483647)) (i32.const 0))"#,
        ),
        (
            "request written out of bounds",
            r#"(func (export "__guest_call") (param i32 i32) (result i32)
                 (call $guest_request (i32.const 65535) (i32.const 65535)) (i32.const 1))"#,
        ),
        (
            "host call with a bad binding pointer",
            r#"(func (export "__guest_call") (param i32 i32) (result i32)
                 (drop (call $host_call (i32.const -1) (i32.const 64) (i32.const 1) (i32.const 1)
                   (i32.const 2) (i32.const 2) (i32.const 0) (i32.const 0)))
                 (i32.const 1))"#,
        ),
    ] {
        let e = engine(body, Duration::from_secs(2));
        match call(&e, b"payload") {
            Err(EvalError::Trap(_)) => {}
            other => panic!("{what}: expected a trap, got {other:?}"),
        }
    }
}

#[test]
fn a_module_without_wapc_exports_is_named() {
    let e = engine("", Duration::from_secs(2));
    assert!(matches!(call(&e, b""), Err(EvalError::NotWapc(_))));
}

/// The compilation cache never recompresses an entry, however often it was loaded
/// (wasmtime's default: at zstd level 20 after 256 loads, seconds of a core for the
/// policy's artifact, in the background of a serving host).
#[test]
fn the_compilation_cache_never_recompresses_an_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::new();
    config.cache(Some(
        wasmtime::Cache::new(cache_config(dir.path())).expect("cache"),
    ));
    let engine = Engine::new(&config).expect("engine");
    let wasm = wat::parse_str("(module (func (export \"f\")))").expect("test module");
    let stats = || -> Option<(std::path::PathBuf, String)> {
        let mut found = std::fs::read_dir(dir.path().join("modules"))
            .ok()?
            .filter_map(|d| std::fs::read_dir(d.ok()?.path()).ok())
            .flatten()
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "stats"));
        let path = found.next()?;
        let text = std::fs::read_to_string(&path).ok()?;
        Some((path, text))
    };
    let usages = |text: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix("usages = "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    };
    // Loads the module (a cache hit after the first) and waits for the cache's worker,
    // one thread handling events in order, to count it.
    let load_counted = |at_least: u64| {
        Module::new(&engine, &wasm).expect("compiles");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some((_, text)) = stats() {
                if usages(&text) >= at_least {
                    return;
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the cache's worker counted no load: {:?}",
                stats()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    Module::new(&engine, &wasm).expect("compiles");
    load_counted(1);
    // As after 100 000 loads: far past wasmtime's default threshold of 256.
    let (path, _) = stats().expect("stats file");
    std::fs::write(&path, "usages = 100000\noptimized-compression = 3\n").expect("stats");
    load_counted(100_001);
    // The worker handled the load above whole (recompressing, by default) before it counts
    // this one.
    load_counted(100_002);
    let (_, text) = stats().expect("stats file");
    assert!(
        text.contains("optimized-compression = 3"),
        "the entry was recompressed: {text}"
    );
}

/// Calls the host in a loop for ever: each call is quick guest work and a slow host call.
const HOST_CALLS_FOR_EVER: &str = r#"
  (func (export "__guest_call") (param $op_len i32) (param $len i32) (result i32)
    (loop
      (drop (call $host_call (i32.const 0) (i32.const 1) (i32.const 1) (i32.const 1)
          (i32.const 2) (i32.const 2) (i32.const 1024) (i32.const 0)))
      (br 0))
    (i32.const 1))
"#;

/// Security review R13: the guest's budget is re-armed after every host call, so a guest
/// that keeps calling a slow host ran for ever. The total deadline ends it: no host call
/// starts after it, and the evaluation ends within a call and a grace of it.
#[test]
fn host_calls_cannot_stretch_an_evaluation_past_its_total_deadline() {
    struct Slow(Mutex<Vec<std::time::Instant>>);
    impl Capabilities for Slow {
        fn call(&self, _: &str, _: &str, _: &str, _: &[u8]) -> Result<Vec<u8>, HostCallError> {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(std::time::Instant::now());
            std::thread::sleep(Duration::from_millis(100));
            Ok(Vec::new())
        }
    }
    let wat = format!("(module {IMPORTS} {HOST_CALLS_FOR_EVER})");
    let wasm = wat::parse_str(&wat).expect("test module");
    let total = Duration::from_millis(600);
    let options = EngineOptions {
        timeout: Duration::from_millis(300),
        total,
        max_memory_bytes: 16 << 20,
        ..EngineOptions::default()
    };
    let e = PolicyEngine::new(&wasm, options).expect("compiles");
    for _ in 0..2 {
        let slow = Arc::new(Slow(Mutex::new(vec![])));
        let started = std::time::Instant::now();
        let got = e.call("validate", b"", slow.clone());
        let took = started.elapsed();
        assert!(
            matches!(got, Err(EvalError::TotalDeadline(d)) if d == total),
            "{got:?}"
        );
        let calls = slow.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert!(calls.len() >= 2, "{} host calls", calls.len());
        let late: Vec<_> = calls
            .iter()
            .map(|c| c.duration_since(started))
            .filter(|at| *at > total)
            .collect();
        assert!(
            late.is_empty(),
            "host calls started past the deadline at {late:?}"
        );
        // At most one call under way at the deadline, then the grace (and a loaded machine).
        let bound = total
            + Duration::from_millis(100)
            + TICK * (GRACE_TICKS as u32)
            + Duration::from_secs(1);
        assert!(took < bound, "took {took:?}, bound {bound:?}");
    }
}

/// What is left of the total cuts the guest's budget after a host call, down to a grace.
#[test]
fn the_ticks_after_a_host_call_are_what_is_left_of_the_total() {
    let now = Instant::now();
    let state = |left: Duration| State {
        wasi: WasiCtxBuilder::new().build_p1(),
        limits: StoreLimitsBuilder::new().build(),
        capabilities: Arc::new(Reverse),
        operation: String::new(),
        payload: Vec::new(),
        guest_response: None,
        guest_error: None,
        host_response: None,
        host_error: None,
        deadline_ticks: 40,
        ends: now + left,
    };
    assert_eq!(
        state(Duration::from_secs(10)).ticks_after_host_call(now),
        40
    );
    assert_eq!(
        state(Duration::from_millis(320)).ticks_after_host_call(now),
        7
    );
    assert_eq!(
        state(Duration::from_millis(1)).ticks_after_host_call(now),
        GRACE_TICKS
    );
    assert_eq!(
        state(Duration::ZERO).ticks_after_host_call(now),
        GRACE_TICKS
    );
    assert!(state(Duration::ZERO).past_total_deadline(now));
    assert!(!state(Duration::from_millis(1)).past_total_deadline(now));
}
