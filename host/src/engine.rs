//! A waPC host on wasmtime: the module is loaded precompiled (`precompiled.rs`) or
//! compiled once (with an on-disk compilation cache) for a fixed CPU baseline
//! (`baseline.rs`), and instantiated under an epoch deadline and a memory cap. Fresh for every
//! evaluation, like Kubewarden's policy-server, unless [`EngineOptions::reuse`] keeps
//! instances between evaluations (waPC's own model: `__guest_call` again on the same
//! instance; the policy keeps no state between calls): an instance that trapped, ran out
//! of time or grew past [`REUSE_MEMORY_BYTES`] is dropped, and none serves more than
//! [`REUSE_CALLS`] evaluations. A trapping or runaway guest yields an error; the engine
//! stays usable.

use crate::capabilities::{Capabilities, HostCallError};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use thiserror::Error;
use wasmtime::{
    Caller, Config, Engine, InstanceAllocationStrategy, InstancePre, Linker, Module,
    PoolingAllocationConfig, Store, StoreLimits, StoreLimitsBuilder, TypedFunc,
};
use wasmtime_wasi::p1::{self, WasiP1Ctx};
use wasmtime_wasi::WasiCtxBuilder;

/// Epoch tick; deadlines are whole ticks.
const TICK: Duration = Duration::from_millis(50);
/// Ticks a guest still gets after a host call that returned past the total deadline.
const GRACE_TICKS: u64 = 4;
/// A kept instance whose linear memory grew past this is dropped after its evaluation
/// (a large request once should not hold its memory for good).
pub const REUSE_MEMORY_BYTES: usize = 32 << 20;
/// Evaluations one kept instance serves at most (allocator fragmentation stays bounded).
pub const REUSE_CALLS: u32 = 10_000;

/// Engine settings.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Evaluation deadline of the guest's own execution (Kubewarden's default policy
    /// timeout is 2 s); time blocked in host calls, which have their own timeouts, does not
    /// count against it.
    pub timeout: Duration,
    /// Wall-clock bound of one evaluation, host calls included: no host call starts past
    /// it, and the guest is interrupted at its first tick after it (security review R13:
    /// re-arming `timeout` at every host call left an evaluation no total bound). Below
    /// the webhook's `timeoutSeconds`, after which nobody waits for the answer.
    pub total: Duration,
    /// Linear memory cap per instance.
    pub max_memory_bytes: usize,
    /// Pooling allocator slots (concurrent instances); 0 = on-demand allocation.
    pub pool_instances: u32,
    /// Directory for wasmtime's compilation cache; `None` disables it.
    pub cache_dir: Option<std::path::PathBuf>,
    /// Idle instances kept for the next evaluations; 0 = a fresh one for each.
    pub reuse: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            timeout: Duration::from_secs(2),
            total: Duration::from_secs(8),
            max_memory_bytes: 256 << 20,
            pool_instances: 0,
            cache_dir: None,
            reuse: 0,
        }
    }
}

/// Why an evaluation failed.
#[derive(Debug, Error)]
pub enum EvalError {
    #[error("policy evaluation exceeded its {0:?} deadline")]
    Timeout(Duration),
    #[error("policy evaluation, its host calls included, exceeded its {0:?} total deadline")]
    TotalDeadline(Duration),
    #[error("policy trapped: {0}")]
    Trap(String),
    #[error("policy returned an error: {0}")]
    Guest(String),
    #[error("policy module is not a waPC guest: {0}")]
    NotWapc(String),
    #[error("instantiating the policy failed: {0}")]
    Instantiate(String),
}

/// Per-evaluation store state.
pub struct State {
    wasi: WasiP1Ctx,
    limits: StoreLimits,
    capabilities: Arc<dyn Capabilities>,
    operation: String,
    payload: Vec<u8>,
    guest_response: Option<Vec<u8>>,
    guest_error: Option<String>,
    host_response: Option<Vec<u8>>,
    host_error: Option<String>,
    deadline_ticks: u64,
    /// When the running evaluation must be over ([`EngineOptions::total`]).
    ends: Instant,
}

/// The trap a host call raises past [`EngineOptions::total`].
#[derive(Debug, Error)]
#[error("the evaluation's total deadline has passed")]
pub(crate) struct PastTotalDeadline;

/// An instance between evaluations: its store, the guest's entry point, and how many
/// evaluations it served.
struct Warm {
    store: Store<State>,
    guest_call: TypedFunc<(i32, i32), i32>,
    memory: Option<wasmtime::Memory>,
    served: u32,
}

/// A compiled policy module, ready to instantiate.
pub struct PolicyEngine {
    engine: Engine,
    pre: InstancePre<State>,
    options: EngineOptions,
    /// Idle instances, at most `options.reuse`.
    warm: Mutex<Vec<Warm>>,
}

impl PolicyEngine {
    /// Compiles `wasm` and links WASI preview 1 plus the waPC imports.
    pub fn new(wasm: &[u8], options: EngineOptions) -> anyhow::Result<Self> {
        Ok(Self::load(wasm, options, None)?.0)
    }

    /// As [`PolicyEngine::new`], from the module precompiled in `precompiled` for this
    /// engine's configuration when there is one (`precompiled::load`); says which.
    pub fn load(
        wasm: &[u8],
        options: EngineOptions,
        precompiled: Option<&Path>,
    ) -> anyhow::Result<(Self, precompiled::Loaded)> {
        let engine = Engine::new(&engine_config(&options)?)?;
        let (module, loaded) = precompiled::load(&engine, wasm, precompiled)?;
        Ok((Self::link(engine, &module, options)?, loaded))
    }

    /// Writes `wasm` compiled for the engine `options` configure into `dir` (the file
    /// `serve --precompiled-dir` looks for); returns its path.
    pub fn precompile(
        wasm: &[u8],
        options: &EngineOptions,
        dir: &Path,
    ) -> anyhow::Result<std::path::PathBuf> {
        let engine = Engine::new(&engine_config(options)?)?;
        precompiled::precompile(&engine, wasm, dir)
    }

    fn link(engine: Engine, module: &Module, options: EngineOptions) -> anyhow::Result<Self> {
        let mut linker: Linker<State> = Linker::new(&engine);
        p1::add_to_linker_sync(&mut linker, |s: &mut State| &mut s.wasi)?;
        wapc::add_to_linker(&mut linker)?;
        let pre = linker.instantiate_pre(module)?;
        spawn_epoch_ticker(&engine);
        Ok(PolicyEngine {
            engine,
            pre,
            options,
            warm: Mutex::new(Vec::new()),
        })
    }

    fn deadline_ticks(&self) -> u64 {
        u64::try_from(self.options.timeout.as_millis() / TICK.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// Reads and compiles a module file.
    pub fn from_file(path: &Path, options: EngineOptions) -> anyhow::Result<Self> {
        let wasm =
            std::fs::read(path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        Self::new(&wasm, options)
    }

    /// Runs waPC operation `operation` on a kept instance, or a fresh one.
    pub fn call(
        &self,
        operation: &str,
        payload: &[u8],
        capabilities: Arc<dyn Capabilities>,
    ) -> Result<Vec<u8>, EvalError> {
        let kept = self.take_warm();
        let mut warm = match kept {
            Some(w) => w,
            None => self.instantiate(capabilities.clone())?,
        };
        let data = warm.store.data_mut();
        data.capabilities = capabilities;
        data.operation.clear();
        data.operation.push_str(operation);
        data.payload.clear();
        data.payload.extend_from_slice(payload);
        data.guest_response = None;
        data.guest_error = None;
        data.host_response = None;
        data.host_error = None;
        data.ends = Instant::now() + self.total();
        warm.store.set_epoch_deadline(self.deadline_ticks());
        let lens = (len_i32(operation.len()), len_i32(payload.len()));
        // A trap or a timeout leaves the instance in no known state: it is not kept.
        let called = warm.guest_call.call(&mut warm.store, lens);
        let past_total = warm.store.data().past_total_deadline(Instant::now());
        let ok = called.map_err(|e| self.classify(e, past_total))?;
        let data = warm.store.data_mut();
        let answer = match ok {
            1 => Ok(data.guest_response.take().unwrap_or_default()),
            _ => Err(EvalError::Guest(
                data.guest_error
                    .take()
                    .unwrap_or_else(|| "no error message".into()),
            )),
        };
        self.keep(warm);
        answer
    }

    /// What a failed call was; `past_total`: it ended after the total deadline (an
    /// interrupt then is the total's, whose remainder had cut the guest's budget).
    fn classify(&self, e: wasmtime::Error, past_total: bool) -> EvalError {
        if e.downcast_ref::<PastTotalDeadline>().is_some() {
            return EvalError::TotalDeadline(self.total());
        }
        match e.downcast_ref::<wasmtime::Trap>() {
            Some(wasmtime::Trap::Interrupt) if past_total => EvalError::TotalDeadline(self.total()),
            Some(wasmtime::Trap::Interrupt) => EvalError::Timeout(self.options.timeout),
            _ => EvalError::Trap(format!("{e:#}")),
        }
    }

    /// The total bound, never below the guest's own.
    fn total(&self) -> Duration {
        self.options.total.max(self.options.timeout)
    }

    /// A new instance, initialised (`_start`, `wapc_init`).
    fn instantiate(&self, capabilities: Arc<dyn Capabilities>) -> Result<Warm, EvalError> {
        let state = State {
            wasi: WasiCtxBuilder::new().build_p1(),
            limits: StoreLimitsBuilder::new()
                .memory_size(self.options.max_memory_bytes)
                .instances(1)
                .build(),
            capabilities,
            operation: String::new(),
            payload: Vec::new(),
            guest_response: None,
            guest_error: None,
            host_response: None,
            host_error: None,
            deadline_ticks: self.deadline_ticks(),
            ends: Instant::now() + self.total(),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        store.set_epoch_deadline(self.deadline_ticks());
        let instance = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| EvalError::Instantiate(format!("{e:#}")))?;
        for start in ["_start", "wapc_init"] {
            if let Ok(f) = instance.get_typed_func::<(), ()>(&mut store, start) {
                if let Err(e) = f.call(&mut store, ()) {
                    // A WASI command's `_start` may exit(0).
                    let exited_ok = e
                        .downcast_ref::<wasmtime_wasi::I32Exit>()
                        .is_some_and(|c| c.0 == 0);
                    if !exited_ok {
                        return Err(self.classify(e, false));
                    }
                }
            }
        }
        let guest_call = instance
            .get_typed_func::<(i32, i32), i32>(&mut store, "__guest_call")
            .map_err(|e| EvalError::NotWapc(e.to_string()))?;
        let memory = instance.get_memory(&mut store, "memory");
        Ok(Warm {
            store,
            guest_call,
            memory,
            served: 0,
        })
    }

    fn take_warm(&self) -> Option<Warm> {
        if self.options.reuse == 0 {
            return None;
        }
        self.warm.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    /// Keeps `warm` for a later evaluation if reuse is on, there is room, and it is neither
    /// worn (served [`REUSE_CALLS`]) nor grown past [`REUSE_MEMORY_BYTES`].
    fn keep(&self, mut warm: Warm) {
        if self.options.reuse == 0 {
            return;
        }
        warm.served += 1;
        let size = warm.memory.map_or(0, |m| m.data_size(&warm.store));
        if warm.served >= REUSE_CALLS || size > REUSE_MEMORY_BYTES {
            return;
        }
        // The capabilities of the evaluation that ended (caches, a request's state) are
        // not held by an idle instance.
        warm.store.data_mut().capabilities = Arc::new(Idle);
        let mut idle = self.warm.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < self.options.reuse {
            idle.push(warm);
        }
    }

    /// Instances kept idle now.
    #[cfg(test)]
    fn idle_instances(&self) -> usize {
        self.warm.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// What an idle instance holds in place of a request's capabilities.
struct Idle;

impl Capabilities for Idle {
    fn call(&self, b: &str, n: &str, o: &str, _: &[u8]) -> Result<Vec<u8>, HostCallError> {
        Err(HostCallError::Internal(format!(
            "host call {b}/{n}/{o} outside an evaluation"
        )))
    }
}

fn len_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The engine's configuration: everything in it that changes compiled code goes into
/// the precompiled module's name (`precompiled::artifact_name`).
fn engine_config(options: &EngineOptions) -> anyhow::Result<Config> {
    let (mut config, _) = baseline::config();
    config.epoch_interruption(true);
    if options.pool_instances > 0 {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_core_instances(options.pool_instances)
            .total_memories(options.pool_instances)
            .total_tables(options.pool_instances)
            .max_memory_size(options.max_memory_bytes);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    if let Some(dir) = &options.cache_dir {
        config.cache(Some(wasmtime::Cache::new(cache_config(dir))?));
    }
    Ok(config)
}

/// wasmtime's compilation cache in `dir`, without its recompression: by default its
/// worker recompresses an entry at zstd level 20 in the background once the entry has
/// been loaded 256 times (here: the 256th start of a host sharing the directory, and
/// again every 30 minutes while a start that began it was stopped first). For the
/// policy's ~10 MB artifact that is ~4.5 s of a core (on a 100m CPU request, most of a
/// minute) at a moment nobody chose, beside the admissions, to save ~0.6 MB of disk: the
/// 2026-11-29 profile of a bench row found the host spending 60 % of its CPU there.
fn cache_config(dir: &Path) -> wasmtime::CacheConfig {
    const BASELINE_ZSTD_LEVEL: i32 = 3;
    let mut cache = wasmtime::CacheConfig::new();
    cache
        .with_directory(dir)
        .with_baseline_compression_level(BASELINE_ZSTD_LEVEL)
        // An entry is recompressed only below this level: never.
        .with_optimized_compression_level(BASELINE_ZSTD_LEVEL)
        .with_optimized_compression_usage_counter_threshold(u64::MAX);
    cache
}

/// Advances the engine's epoch every tick until the engine is dropped.
fn spawn_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    std::thread::spawn(move || {
        while let Some(engine) = weak.upgrade() {
            engine.increment_epoch();
            drop(engine);
            std::thread::sleep(TICK);
        }
    });
}

/// Store-state accessors for the waPC imports.
impl State {
    /// Epoch ticks the guest may run after a host call returned `now`: its own budget,
    /// cut to what is left of the total, and at least [`GRACE_TICKS`] (to act on the answer).
    pub(crate) fn ticks_after_host_call(&self, now: Instant) -> u64 {
        let left = self.ends.saturating_duration_since(now);
        let left_ticks =
            u64::try_from(left.as_millis().div_ceil(TICK.as_millis())).unwrap_or(u64::MAX);
        self.deadline_ticks.min(left_ticks.max(GRACE_TICKS))
    }

    /// Whether the total deadline has passed at `now`.
    pub(crate) fn past_total_deadline(&self, now: Instant) -> bool {
        now >= self.ends
    }

    pub(crate) fn invocation(&self) -> (&str, &[u8]) {
        (&self.operation, &self.payload)
    }
    pub(crate) fn set_guest_response(&mut self, bytes: Vec<u8>) {
        self.guest_response = Some(bytes);
    }
    pub(crate) fn set_guest_error(&mut self, msg: String) {
        self.guest_error = Some(msg);
    }
    pub(crate) fn host_call(
        &mut self,
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &[u8],
    ) -> bool {
        self.host_response = None;
        self.host_error = None;
        match self
            .capabilities
            .call(binding, namespace, operation, payload)
        {
            Ok(bytes) => {
                self.host_response = Some(bytes);
                true
            }
            Err(e) => {
                self.host_error = Some(e.guest_text());
                false
            }
        }
    }
    pub(crate) fn host_response(&self) -> &[u8] {
        self.host_response.as_deref().unwrap_or_default()
    }
    pub(crate) fn host_error(&self) -> &[u8] {
        self.host_error
            .as_deref()
            .map(str::as_bytes)
            .unwrap_or_default()
    }
    pub(crate) fn log(&self, message: &str) {
        self.capabilities.log(message);
    }
}

/// Guest memory of the calling instance.
pub(crate) fn memory(caller: &mut Caller<'_, State>) -> wasmtime::Result<wasmtime::Memory> {
    caller
        .get_export("memory")
        .and_then(|e| e.into_memory())
        .ok_or_else(|| wasmtime::format_err!("the guest exports no memory"))
}

pub mod baseline;
pub mod evaluate;
pub mod precompiled;
mod wapc;

#[cfg(test)]
mod tests;
