//! Errors across the host–guest seam. A waPC host answers a failed host call with text
//! (`__host_error`); this project's hosts (`serve`, `run`) put a stable code in front of
//! it — `[workloadspread:NotFound] apps/v1 ReplicaSet ns/web-1 not found` — so the guest
//! decides on the code, not on the wording. Text from other hosts (Kubewarden's
//! policy-server, kwctl) carries no code and is judged by its words.

/// What went wrong, as the guest acts on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    /// The object does not exist.
    NotFound,
}

impl ErrorCode {
    fn name(self) -> &'static str {
        match self {
            ErrorCode::NotFound => "NotFound",
        }
    }
}

const PREFIX: &str = "[workloadspread:";

/// `message` with `code` in front.
pub fn coded(code: ErrorCode, message: &str) -> String {
    format!("{PREFIX}{}] {message}", code.name())
}

/// The code in front of a host's error text, if it has one.
pub fn code_of(text: &str) -> Option<ErrorCode> {
    let rest = text.strip_prefix(PREFIX)?;
    let (name, _) = rest.split_once(']')?;
    [ErrorCode::NotFound].into_iter().find(|c| c.name() == name)
}

/// Whether a host's error text says "not found": by its code when it has one, else by
/// the words other hosts use.
pub fn is_not_found(text: &str) -> bool {
    match code_of(text) {
        Some(code) => code == ErrorCode::NotFound,
        None if text.starts_with(PREFIX) => false,
        None => {
            let t = text.to_ascii_lowercase();
            t.contains("not found") || t.contains("notfound") || t.contains("cannot find")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_decide_and_other_hosts_words_are_understood() {
        let text = coded(ErrorCode::NotFound, "apps/v1 ReplicaSet ns/x not found");
        assert_eq!(code_of(&text), Some(ErrorCode::NotFound));
        assert!(is_not_found(&text));
        // A coded error of another kind is not "not found", whatever its words say.
        assert!(!is_not_found(
            "[workloadspread:Other] the pod was not found in time"
        ));
        // policy-server's text has no code: its words decide.
        assert!(is_not_found("error: replicasets.apps \"x\" not found"));
        assert!(is_not_found("Cannot find apps/v1 ReplicaSet"));
        assert!(!is_not_found(
            "Policy has not been granted access to Kubernetes resource"
        ));
    }
}
