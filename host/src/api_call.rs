//! One call to the API server, abandoned after a limit: every call has one. The host's
//! one-shot commands and its registration and CA-bundle writes share this; each module
//! names its own limit.

use std::future::Future;
use std::time::Duration;

/// `call`'s output, or an error saying the API server did not answer within `limit`
/// (the call is dropped: a request still in flight is cancelled).
pub async fn bounded<T>(limit: Duration, call: impl Future<Output = T>) -> anyhow::Result<T> {
    tokio::time::timeout(limit, call)
        .await
        .map_err(|_| anyhow::anyhow!("the API server did not answer within {limit:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_call_that_does_not_answer_in_time_is_an_error_naming_the_limit() {
        let limit = Duration::from_secs(20);
        let e = bounded(limit, std::future::pending::<()>())
            .await
            .expect_err("a call that never answers");
        assert_eq!(e.to_string(), "the API server did not answer within 20s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_answers_in_time_gives_its_output() {
        let answer = bounded(Duration::from_secs(20), async {
            tokio::time::sleep(Duration::from_secs(19)).await;
            7
        })
        .await;
        assert_eq!(answer.ok(), Some(7));
    }
}
