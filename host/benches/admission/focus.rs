//! Which rows a run measures (`WS_BENCH_FOCUS`).

use super::{Webhook, CONCURRENCY};
use anyhow::Result;

/// Which rows a run measures (`WS_BENCH_FOCUS`): every row (`all`, the default, what
/// `make bench` runs), only what issue #28's goals compare (`whole-system`: no
/// webhook, the no-op floor, host + controller
/// at concurrency 1 and 64, then the scale-out's writes), to measure a change to the
/// per-pod cost without the other rows' 20 minutes, or host + controller against
/// OpenKruise (`openkruise`: no webhook, both floors, host + controller and the two
/// OpenKruise rows at every concurrency), the scale sequence alone (`sequence`), or the
/// large scale-ins of issue #65 alone (`scale-in`).
/// OpenKruise rows need its build
/// ([`kruise::read_build`]); without it `all` leaves them out and says so.
#[derive(Clone, Copy, PartialEq)]
pub(super) struct Focus {
    pub(super) scope: Scope,
    pub(super) kruise: bool,
}

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Scope {
    All,
    WholeSystem,
    OpenKruise,
    /// The scale sequence alone (`sequence`).
    Sequence,
    /// The 600 → 60 and 3 000 → 300 scale-ins alone (`scale-in`).
    ScaleIn,
}

impl Scope {
    pub(super) fn from_env() -> Result<Scope> {
        match std::env::var("WS_BENCH_FOCUS").as_deref() {
            Err(_) | Ok("") | Ok("all") => Ok(Scope::All),
            Ok("whole-system") => Ok(Scope::WholeSystem),
            Ok("openkruise") => Ok(Scope::OpenKruise),
            Ok("sequence") => Ok(Scope::Sequence),
            Ok("scale-in") => Ok(Scope::ScaleIn),
            Ok(other) => anyhow::bail!(
                "WS_BENCH_FOCUS={other}: expected `all` (default), `whole-system`, `openkruise`, `sequence` or `scale-in`"
            ),
        }
    }
}

impl Focus {
    /// The concurrencies of the table (the goals compare 1 and 64).
    pub(super) fn concurrency(self) -> &'static [usize] {
        match self.scope {
            Scope::All | Scope::OpenKruise | Scope::Sequence | Scope::ScaleIn => &CONCURRENCY,
            Scope::WholeSystem => &[1, 64],
        }
    }

    pub(super) fn includes(self, w: Webhook) -> bool {
        let base = matches!(
            w,
            Webhook::None | Webhook::Noop | Webhook::NoopPatch | Webhook::HostAndController
        );
        match (self.scope, w) {
            (_, Webhook::Kruise { .. }) => self.kruise && self.scope != Scope::WholeSystem,
            (Scope::All, _) => true,
            (Scope::WholeSystem | Scope::OpenKruise, _) => base,
            (Scope::Sequence | Scope::ScaleIn, _) => false,
        }
    }
}
