//! When a component stops.

/// Resolves on SIGTERM or Ctrl-C (SIGINT): the request to stop gracefully. `component`
/// names the process in the warnings. Should SIGTERM not be handleable, Ctrl-C still
/// stops it; should SIGINT not be either, only SIGTERM does (an error there is no request
/// to stop: taking it for one would stop a process the moment it started serving).
pub async fn shutdown(component: &str) {
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c(component) => {}
                    _ = term.recv() => {}
                }
            }
            Err(e) => {
                tracing::warn!(
                    "cannot handle SIGTERM ({e}): only Ctrl-C stops the {component} gracefully"
                );
                ctrl_c(component).await;
            }
        }
    }
    #[cfg(not(unix))]
    ctrl_c(component).await;
}

/// Returns on Ctrl-C; never, when SIGINT cannot be handled.
async fn ctrl_c(component: &str) {
    if let Err(e) = tokio::signal::ctrl_c().await {
        tracing::warn!("cannot handle Ctrl-C ({e}): the {component} stops only when killed");
        std::future::pending::<()>().await;
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::time::Duration;

    /// SIGTERM (what the kubelet sends) stops a component.
    #[tokio::test]
    async fn sigterm_is_a_request_to_stop() {
        let stop = tokio::spawn(super::shutdown("test"));
        // The handler is installed at the task's first poll (this sleep yields to it);
        // from then on SIGTERM no longer ends this test process.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let pid = std::process::id().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(sent.success());
        let stopped = tokio::time::timeout(Duration::from_secs(5), stop).await;
        assert!(matches!(stopped, Ok(Ok(()))), "{stopped:?}");
    }
}
