use super::*;

fn lifetimes() -> Lifetimes {
    Lifetimes {
        cert_seconds: 300,
        ca_seconds: 1200,
        grace_seconds: 30,
    }
}

fn sans() -> Vec<String> {
    vec!["localhost".into()]
}

/// Which CA (by name) signed the serving certificate: the one whose key verifies it
/// is not checkable without a parser, so the test follows the state instead.
fn trusted(state: &TlsState, ca: &Issued) -> bool {
    state.bundle().contains(ca.cert_pem.trim_end())
}

#[test]
fn durations_parse() {
    assert_eq!(parse_duration("365d"), Ok(365 * 86_400));
    assert_eq!(parse_duration("90"), Ok(90));
    assert_eq!(parse_duration("2h"), Ok(7200));
    assert!(parse_duration("1y").is_err());
    assert!(parse_duration("0s").is_err());
}

#[test]
fn the_serving_certificate_is_renewed_by_the_same_ca_without_a_bundle_change() {
    let l = lifetimes();
    let s0 = TlsState::generate(&sans(), 0, &l).unwrap();
    assert!(s0.plan(&sans(), 100, &l, |_| true).unwrap().is_none());
    let s1 = s0.plan(&sans(), 200, &l, |_| true).unwrap().unwrap();
    assert_ne!(s1.serving.cert_pem, s0.serving.cert_pem);
    assert_eq!(s1.bundle(), s0.bundle());
    assert_eq!(s1.generation, s0.generation);
    // The renewed pair is a valid rustls key (the CA re-created from its key signs).
    crate::tls::CertBundle::from_state(&s1)
        .certified_key()
        .unwrap();
}

/// Walks a CA through its life in 10 s steps: at every step the CA that signed the
/// served certificate is in the bundle, also for the previous serving certificate
/// (a replica that has not polled yet).
#[test]
fn a_ca_is_published_before_it_signs_and_kept_until_replicas_moved() {
    let l = lifetimes();
    let mut state = TlsState::generate(&sans(), 0, &l).unwrap();
    let mut signer = state.ca.clone().unwrap();
    let mut previous_signer = signer.clone();
    let mut switches = 0;
    let mut switched_at = i64::MIN;
    let mut in_effect_since: Option<i64> = None;
    for now in (0..4000).step_by(10) {
        let published = state.bundle();
        let next = state
            .plan(&sans(), now, &l, |candidate| {
                // The webhook configurations got the bundle one step after the write.
                published.contains(candidate.cert_pem.trim_end())
                    && in_effect_since.is_some_and(|t| now > t)
            })
            .unwrap();
        if let Some(next) = next {
            if next.generation != state.generation {
                in_effect_since = Some(now);
            }
            if next.ca.as_ref().map(|c| &c.name) != state.ca.as_ref().map(|c| &c.name) {
                switches += 1;
                switched_at = now;
                previous_signer = signer;
                signer = next.ca.clone().unwrap();
                assert!(
                    trusted(&state, &signer),
                    "{now}: the new CA signs before it was published"
                );
            }
            state = next;
        }
        assert!(trusted(&state, &signer), "{now}: signing CA not trusted");
        // Replicas that have not polled since the switch still serve the old CA's
        // certificate: it stays trusted for the grace.
        if now < switched_at.saturating_add(l.grace_seconds) {
            assert!(
                trusted(&state, &previous_signer),
                "{now}: old CA dropped early"
            );
        }
        assert!(
            state.serving.not_after > now,
            "{now}: serving certificate expired"
        );
        assert!(
            state.ca.as_ref().unwrap().not_after > now,
            "{now}: CA expired"
        );
    }
    assert!(
        switches >= 3,
        "{switches} CA switches in 4000 s of 1200 s CAs"
    );
}

/// The next CA is not carried into the configurations for a long time (a slow or
/// refused bundle patch): the current CA keeps renewing the serving certificate, so
/// it never expires before that CA does.
#[test]
fn a_slow_switch_keeps_the_serving_certificate_renewed() {
    let l = lifetimes();
    let mut state = TlsState::generate(&sans(), 0, &l).unwrap();
    let first_ca = state.ca.clone().unwrap();
    let mut pending_seen = false;
    for now in (0..first_ca.not_after).step_by(10) {
        if let Some(next) = state.plan(&sans(), now, &l, |_| false).unwrap() {
            state = next;
        }
        pending_seen |= state.next_ca.is_some();
        assert_eq!(state.ca.as_ref().map(|c| &c.name), Some(&first_ca.name));
        assert!(
            state.serving.not_after > now,
            "{now}: serving certificate expired while the CA (until {}) waited to be replaced",
            first_ca.not_after
        );
    }
    assert!(pending_seen, "no next CA was published");
}

/// Walks a CA's life polled every 10 s. Carried everywhere, the bundle is never
/// reported; never carried (the host may not patch the configurations), it is
/// reported stale within the bound, still ready, and failing (not ready) only from
/// the moment a fix could no longer land before the served certificate expires.
#[test]
fn a_switch_that_never_happens_is_reported_before_the_certificate_expires() {
    let l = lifetimes();
    let poll = 10;
    for carried in [true, false] {
        let mut state = TlsState::generate(&sans(), 0, &l).unwrap();
        let first_ca = state.ca.clone().unwrap();
        let (mut stale_at, mut failing_at) = (None, None);
        for now in (0..first_ca.not_after + 30).step_by(poll as usize) {
            if let Some(next) = state.plan(&sans(), now, &l, |_| carried).unwrap() {
                state = next;
            }
            let health = state.bundle_health(now, &l, poll, None);
            match health.verdict {
                Verdict::Current => {}
                Verdict::Stale => {
                    stale_at.get_or_insert(now);
                }
                Verdict::Failing => {
                    failing_at.get_or_insert(now);
                }
            }
            if carried {
                assert_eq!(health.verdict, Verdict::Current, "{now}: {health:?}");
                assert_eq!(health.stale_seconds, 0, "{now}");
            } else if let Some(published) = state.next_published_at {
                let late = published + l.grace_seconds + poll;
                assert_eq!(health.stale_seconds, (now - late).max(0), "{now}");
                if now >= late + l.stale_after() {
                    assert_ne!(health.verdict, Verdict::Current, "{now}: not reported");
                }
            }
        }
        if carried {
            continue;
        }
        let (stale_at, failing_at) = (stale_at.unwrap(), failing_at.unwrap());
        let published = state.next_published_at.unwrap();
        assert!(
            stale_at <= published + l.grace_seconds + poll + l.stale_after(),
            "stale only at {stale_at} (next CA published at {published})"
        );
        // Ready (only warned) until the outage is certain, then not ready.
        let lead = l.fix_lead(poll);
        assert!(failing_at > stale_at, "not ready as soon as stale");
        assert!(
            failing_at >= first_ca.not_after - lead - poll
                && failing_at <= first_ca.not_after - lead + poll,
            "not ready at {failing_at}: the CA expires at {}, a fix needs {lead} s",
            first_ca.not_after
        );
    }
}

/// Failed writes or checks of the targets (this replica's streak) count the same way;
/// a served certificate past its end is failing whatever the bundle.
#[test]
fn failed_writes_are_stale_after_the_bound_and_an_expired_certificate_fails() {
    let l = lifetimes();
    let fresh = TlsState::generate(&sans(), 0, &l).unwrap();
    let expires = fresh.ca.as_ref().unwrap().not_after;
    // As renewals leave it near the CA's end: served until the CA expires.
    let mut state = fresh.clone();
    state.serving.not_after = expires;
    let bound = l.stale_after();
    let lead = l.fix_lead(10);
    for (now, failing_since, want) in [
        (100, None, Verdict::Current),
        (100, Some(100 - bound + 1), Verdict::Current),
        (100, Some(100 - bound), Verdict::Stale),
        (expires - lead - 1, Some(0), Verdict::Stale),
        (expires - lead, Some(0), Verdict::Failing),
        (expires, None, Verdict::Failing),
    ] {
        let health = state.bundle_health(now, &l, 10, failing_since);
        assert_eq!(
            health.verdict, want,
            "at {now} failing since {failing_since:?}"
        );
        assert_eq!(health.expires_at, expires);
    }
    let served_until = fresh.serving.not_after;
    let at = |now| fresh.bundle_health(now, &l, 10, None).verdict;
    assert_eq!(at(served_until - 1), Verdict::Current);
    assert_eq!(
        at(served_until),
        Verdict::Failing,
        "an expired certificate served"
    );
}

#[test]
fn a_secret_from_before_rotation_gets_a_ca() {
    let l = lifetimes();
    let mut legacy = TlsState::generate(&sans(), 0, &l).unwrap();
    let old_bundle = legacy.bundle();
    legacy.legacy_bundle = Some(old_bundle.clone());
    legacy.ca = None;
    let published = legacy.plan(&sans(), 10, &l, |_| true).unwrap().unwrap();
    assert!(published.bundle().contains(old_bundle.trim_end()));
    assert!(published.next_ca.is_some() && published.ca.is_none());
    // Not before the grace, nor before the configurations carry it.
    assert!(published.plan(&sans(), 20, &l, |_| true).unwrap().is_none());
    assert!(published
        .plan(&sans(), 50, &l, |_| false)
        .unwrap()
        .is_none());
    let switched = published.plan(&sans(), 50, &l, |_| true).unwrap().unwrap();
    assert!(switched.ca.is_some() && switched.legacy_bundle.is_none());
    assert!(
        switched.bundle().contains(old_bundle.trim_end()),
        "still trusted"
    );
    let dropped = switched.plan(&sans(), 90, &l, |_| true).unwrap().unwrap();
    assert!(!dropped.bundle().contains(old_bundle.trim_end()));
}
