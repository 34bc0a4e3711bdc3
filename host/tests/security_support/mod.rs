//! What `security.rs` shares: a spread ReplicaSet, pods created through the API server,
//! raw TLS connections to the host, the host's peak memory.

use anyhow::{bail, ensure, Context, Result};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use workloadspread_testkit::webhook::{free_port, policy_wasm, HostProcess, WebhookConfigs};
use workloadspread_testkit::{cluster, unique_name, TestNamespace};

pub const MATCHED: &str = "apps.kruise.io/matched-workloadspread";

/// The attacks (`slow_and_large_requests_…`, `starvation::…`: 8 MiB bodies, hundreds of
/// slow connections) load both cores on purpose and accept admissions slowed to the
/// webhook timeout. A test beside one that asserts no admission is refused would measure
/// the attack, not itself (seen in CI: the rotation test's claim outwaited its 7 s
/// counter budget while 8 MiB bodies were parsed beside it). Attacks hold
/// [`attack_alone`], every other test [`beside_others`].
static MACHINE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Held by an attack for its whole run: no other test of this binary runs meanwhile.
pub async fn attack_alone() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    MACHINE.write().await
}

/// Held by every test that is not an attack: such tests run beside each other.
pub async fn beside_others() -> tokio::sync::RwLockReadGuard<'static, ()> {
    MACHINE.read().await
}

pub fn host_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_workloadspread-host"))
}

/// A client certificate for common name `cn` signed by the local control plane's CA
/// `ca` (`pki/<ca>.crt` and `.key`), with openssl: its certificate and key files.
pub fn sign_client(cn: &str, ca: &str) -> Result<(PathBuf, PathBuf)> {
    let dir = std::env::temp_dir().join(unique_name("client-cert"));
    std::fs::create_dir_all(&dir)?;
    let (key, csr, crt) = (dir.join("c.key"), dir.join("c.csr"), dir.join("c.crt"));
    let ext = dir.join("c.ext");
    std::fs::write(&ext, "extendedKeyUsage = clientAuth\n")?;
    let serial = format!(
        "{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos()
    );
    let run = |args: &[&std::ffi::OsStr]| -> Result<()> {
        let out = std::process::Command::new("openssl").args(args).output()?;
        anyhow::ensure!(
            out.status.success(),
            "openssl: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    };
    let subject = format!("/CN={cn}");
    run(&[
        "req".as_ref(),
        "-newkey".as_ref(),
        "rsa:2048".as_ref(),
        "-nodes".as_ref(),
        "-subj".as_ref(),
        subject.as_ref(),
        "-keyout".as_ref(),
        key.as_os_str(),
        "-out".as_ref(),
        csr.as_os_str(),
    ])?;
    let (ca_crt, ca_key) = (pki(&format!("{ca}.crt"))?, pki(&format!("{ca}.key"))?);
    run(&[
        "x509".as_ref(),
        "-req".as_ref(),
        "-days".as_ref(),
        "1".as_ref(),
        "-in".as_ref(),
        csr.as_os_str(),
        "-CA".as_ref(),
        ca_crt.as_os_str(),
        "-CAkey".as_ref(),
        ca_key.as_os_str(),
        "-set_serial".as_ref(),
        serial.as_ref(),
        "-extfile".as_ref(),
        ext.as_os_str(),
        "-out".as_ref(),
        crt.as_os_str(),
    ])?;
    Ok((crt, key))
}

pub fn pki(file: &str) -> Result<PathBuf> {
    let dir = cluster()?
        .kubeconfig()
        .parent()
        .context("kubeconfig without a directory")?
        .join("pki");
    let path = dir.join(file);
    ensure!(
        path.exists(),
        "{} is missing: the cluster predates e2e/cluster/cluster.sh's webhook client \
         certificate (run `cluster.sh down` and `up` again)",
        path.display()
    );
    Ok(path)
}

pub fn ws_api(ns: &TestNamespace) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "apps.kruise.io",
        "v1beta1",
        "WorkloadSpread",
    ));
    Api::namespaced_with(ns.client(), ns.name(), &resource)
}

/// A ReplicaSet `web` (0 replicas: pods are created by the test, owned by it) and a
/// WorkloadSpread over it with one large subset; returns the ReplicaSet's uid.
pub async fn spread_over_replicaset(ns: &TestNamespace, max: i64) -> Result<String> {
    spread_over_replicas(ns, max, 0).await
}

/// As [`spread_over_replicaset`] with `replicas` pods of the ReplicaSet's own (the
/// controller recounts a workload of 0 replicas to an empty status).
pub async fn spread_over_replicas(ns: &TestNamespace, max: i64, replicas: i32) -> Result<String> {
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas,
            "selector": {"matchLabels": {"app": "web", "pod-template-hash": "5f7b9c"}},
            "template": {"metadata": {"labels": {"app": "web", "pod-template-hash": "5f7b9c"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}
    }))?;
    let rs = ns
        .api::<ReplicaSet>()
        .create(&PostParams::default(), &rs)
        .await?;
    let ws: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
        "metadata": {"name": "web"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web"},
            "subsets": [{"name": "a", "maxReplicas": max}]}
    }))?;
    ws_api(ns).create(&PostParams::default(), &ws).await?;
    rs.metadata.uid.context("ReplicaSet without uid")
}

pub fn owned_pod(name: &str, rs_uid: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name,
            "labels": {"app": "web", "pod-template-hash": "5f7b9c", "probe": "yes"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                "uid": rs_uid, "controller": true}]},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}
    }))?)
}

pub fn target() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web"})
}

/// Creates an owned pod through the API server; its admission time and whether the
/// webhook placed it.
pub async fn admit(ns: &TestNamespace, rs_uid: &str, name: &str) -> Result<(Duration, bool)> {
    let started = Instant::now();
    let pod = ns
        .api::<Pod>()
        .create(&PostParams::default(), &owned_pod(name, rs_uid)?)
        .await
        .with_context(|| format!("creating pod {name}"))?;
    let placed = pod
        .metadata
        .annotations
        .is_some_and(|a| a.contains_key(MATCHED));
    Ok((started.elapsed(), placed))
}

pub fn tls_client(ca_pem: &str) -> Result<tokio_rustls::TlsConnector> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

pub async fn connect(
    tls: &tokio_rustls::TlsConnector,
    port: u16,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?.to_owned();
    Ok(tls.connect(name, tcp).await?)
}

/// Peak resident memory of a process (`VmHWM`), in MiB.
pub fn high_water_mib(pid: u32) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .context("no VmHWM")?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()?;
    Ok(kib / 1024.0)
}

/// A slowloris connection: headers started and never finished, one more header line a
/// second. Returns how long the host kept it open (capped at `cap`).
pub async fn slowloris(
    tls: tokio_rustls::TlsConnector,
    port: u16,
    cap: Duration,
) -> Result<Duration> {
    let started = Instant::now();
    let mut stream = connect(&tls, port).await?;
    stream
        .write_all(
            b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n",
        )
        .await?;
    let mut buf = [0u8; 512];
    while started.elapsed() < cap {
        tokio::select! {
            read = stream.read(&mut buf) => match read {
                Ok(0) | Err(_) => return Ok(started.elapsed()),
                Ok(_) => return Ok(started.elapsed()), // an error response, then close
            },
            () = tokio::time::sleep(Duration::from_secs(1)) => {
                if stream.write_all(b"X-Slow: 1\r\n").await.is_err() {
                    return Ok(started.elapsed());
                }
            }
        }
    }
    Ok(cap)
}

/// POSTs `body` to /mutate on a fresh connection; the HTTP status, or 0 when the host
/// closed the connection before answering (e.g. busy: it refuses before reading a body).
pub async fn post_body(
    tls: tokio_rustls::TlsConnector,
    port: u16,
    body: Arc<Vec<u8>>,
) -> Result<u16> {
    let mut stream = connect(&tls, port).await?;
    let head = format!(
        "POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let sent = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(&body).await
    }
    .await;
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response[..response.len().min(64)]).into_owned();
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok());
    match (code, sent) {
        (Some(code), _) => Ok(code),
        (None, Err(_)) => Ok(0),
        (None, Ok(())) => bail!("no HTTP status in {text:?}"),
    }
}

/// An AdmissionReview of `bytes` (a pod creation carrying one huge annotation).
pub fn big_review(namespace: &str, bytes: usize) -> Vec<u8> {
    let filler = "x".repeat(bytes.saturating_sub(2048));
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": unique_name("big"), "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace, "operation": "CREATE", "userInfo": {"username": "attacker"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "big", "namespace": namespace, "annotations": {"big": filler}},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}}}))
    .unwrap_or_default()
}

pub fn secret_generation(secret: &Secret) -> Option<u64> {
    let state: Value = serde_json::from_str(
        secret
            .metadata
            .annotations
            .as_ref()?
            .get("workloadspread.io/tls-state")?,
    )
    .ok()?;
    state["generation"].as_u64()
}

/// A copy of `kubeconfig` acting as `user` (impersonation): that user may do what RBAC
/// grants it, nothing more.
pub fn impersonating_kubeconfig(kubeconfig: &Path, user: &str) -> Result<PathBuf> {
    let mut config: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(kubeconfig)?)?;
    let users = config["users"]
        .as_sequence_mut()
        .context("kubeconfig without users")?;
    for u in users {
        u["user"]["as"] = user.into();
    }
    let path = std::env::temp_dir().join(format!("{}.kubeconfig", unique_name("as")));
    std::fs::write(&path, serde_yaml::to_string(&config)?)?;
    Ok(path)
}

/// Cluster roles for a host running as `user`: everything it reads and writes, with
/// writing the webhook configurations `name` in a binding of its own (revocable).
pub struct HostRbac {
    client: kube::Client,
    user: String,
    read: String,
    write: String,
}

impl HostRbac {
    pub async fn grant(client: &kube::Client, user: &str, name: &str) -> Result<Self> {
        use k8s_openapi::api::rbac::v1::ClusterRole;
        let rbac = HostRbac {
            client: client.clone(),
            user: user.to_string(),
            read: unique_name("ws-host-read"),
            write: unique_name("ws-host-write"),
        };
        let configs = json!([
            "mutatingwebhookconfigurations",
            "validatingwebhookconfigurations"
        ]);
        let roles = [
            (
                &rbac.read,
                json!([
                    {"apiGroups": ["", "apps", "batch", "apps.kruise.io", "apiextensions.k8s.io",
                        "coordination.k8s.io", "events.k8s.io"],
                     "resources": ["*"], "verbs": ["*"]},
                    {"apiGroups": ["admissionregistration.k8s.io"], "resources": configs,
                     "verbs": ["get", "list", "watch"]},
                ]),
            ),
            (
                &rbac.write,
                json!([{"apiGroups": ["admissionregistration.k8s.io"], "resources": configs,
                    "resourceNames": [name], "verbs": ["update", "patch"]}]),
            ),
        ];
        let api: Api<ClusterRole> = Api::all(client.clone());
        for (role, rules) in roles {
            let role: ClusterRole =
                serde_json::from_value(json!({"metadata": {"name": role}, "rules": rules}))?;
            api.create(&PostParams::default(), &role).await?;
        }
        rbac.bind(&rbac.read).await?;
        rbac.bind(&rbac.write).await?;
        Ok(rbac)
    }

    async fn bind(&self, role: &str) -> Result<()> {
        use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
        let binding: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": self.user}],
        }))?;
        Api::<ClusterRoleBinding>::all(self.client.clone())
            .create(&PostParams::default(), &binding)
            .await?;
        Ok(())
    }

    /// Takes the right to write the webhook configurations away.
    pub async fn revoke_write(&self) -> Result<()> {
        use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
        Api::<ClusterRoleBinding>::all(self.client.clone())
            .delete(&self.write, &Default::default())
            .await?;
        Ok(())
    }

    /// Gives it back.
    pub async fn grant_write(&self) -> Result<()> {
        self.bind(&self.write).await
    }

    pub async fn delete(self) -> Result<()> {
        use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
        for name in [&self.read, &self.write] {
            let _ = Api::<ClusterRoleBinding>::all(self.client.clone())
                .delete(name, &Default::default())
                .await;
            Api::<ClusterRole>::all(self.client.clone())
                .delete(name, &Default::default())
                .await?;
        }
        Ok(())
    }
}

/// A host on a free port with the policy, its webhook configurations (not enrolled in any
/// namespace yet), the CRD applied, and `args`; the host, its configurations and the CA
/// bundle its certificates chain to. `None` without the policy module.
pub async fn host_with(args: &[String]) -> Result<Option<(HostProcess, WebhookConfigs, String)>> {
    let Some(policy) = policy_wasm()? else {
        return Ok(None);
    };
    let cluster = cluster()?;
    let client = cluster.client().await?;
    // The host is ready only once WorkloadSpreads are served: alone on a fresh cluster no
    // other test has applied the CRD yet.
    workloadspread_testkit::webhook::apply_crd(
        &client,
        &workloadspread_testkit::stack::workloadspread_crd_json()?,
    )
    .await?;
    let port = free_port()?;
    let name = unique_name("ws-shed");
    let configs =
        WebhookConfigs::create(&client, &name, &format!("https://127.0.0.1:{port}")).await?;
    let ca_file = std::env::temp_dir().join(format!("{}.pem", unique_name("ca")));
    let mut all = vec![
        "--policy".into(),
        policy.display().to_string(),
        "--webhook-config".into(),
        name,
        "--ca-bundle-out".into(),
        ca_file.display().to_string(),
    ];
    all.extend_from_slice(args);
    let host = HostProcess::start_on(host_bin(), cluster.kubeconfig(), port, &all).await?;
    let ca = std::fs::read_to_string(&ca_file)?;
    Ok(Some((host, configs, ca)))
}
