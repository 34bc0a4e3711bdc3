//! The API client's configuration.

use anyhow::{Context, Result};
use std::path::Path;

/// The configuration of `manager`'s API client: from `kubeconfig`, else inferred (the
/// in-cluster service account, then `$KUBECONFIG`), with the user agent that names
/// `manager` (`core::contest::HOST_MANAGER` or `CONTROLLER_MANAGER`). The API server names
/// a component's writes after its user agent (managedFields), which is how a rival writer
/// of a WorkloadSpread's status is told apart from ours (`core::contest`).
pub async fn config(kubeconfig: Option<&Path>, manager: &str) -> Result<kube::Config> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?
        }
        None => kube::Config::infer()
            .await
            .context("finding a kubeconfig")?,
    };
    let agent = workloadspread_core::contest::user_agent(manager);
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_str(&agent).with_context(|| format!("user agent {agent:?}"))?,
    ));
    Ok(config)
}

/// `manager`'s API client, configured by [`config`].
pub async fn client(kubeconfig: Option<&Path>, manager: &str) -> Result<kube::Client> {
    Ok(kube::Client::try_from(config(kubeconfig, manager).await?)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use workloadspread_core::contest::{CONTROLLER_MANAGER, HOST_MANAGER};

    /// Each component names itself: the user agent the API server records as the manager
    /// of its writes is the one `core::contest` counts as ours.
    #[tokio::test]
    async fn the_client_names_its_component() {
        let dir = std::env::temp_dir().join(format!("ws-kube-glue-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
             clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443'}}]\n\
             users: [{name: u, user: {token: t}}]\n\
             contexts: [{name: c, context: {cluster: k, user: u}}]\n",
        )
        .unwrap();
        for manager in [HOST_MANAGER, CONTROLLER_MANAGER] {
            let config = config(Some(&path), manager).await.unwrap();
            let agents: Vec<&str> = config
                .headers
                .iter()
                .filter(|(k, _)| *k == http::header::USER_AGENT)
                .filter_map(|(_, v)| v.to_str().ok())
                .collect();
            assert_eq!(
                agents,
                [workloadspread_core::contest::user_agent(manager)],
                "{manager}"
            );
            assert!(agents[0].starts_with(manager), "{agents:?}");
        }
        let missing = config(Some(&dir.join("absent")), HOST_MANAGER).await;
        assert!(format!("{:#}", missing.unwrap_err()).contains("reading"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
