//! The runtime core's errors: what went wrong, with what was being done. The messages are the
//! ones users see (the binary prints them as they are).

use crate::log::LogError;
use crate::runtime::topics::TopicError;

/// An error of the runtime core or of a backend behind it.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The embedded log.
    #[error(transparent)]
    Log(#[from] LogError),
    /// Topic set-up: partition counts, topics that cannot be created.
    #[error(transparent)]
    Topics(#[from] TopicError),
    /// Local state (sled): `doing` says what could not be done.
    #[error("{doing}: {source}")]
    State {
        doing: String,
        #[source]
        source: sled::Error,
    },
    /// The local state directory is locked by another process.
    #[error(
        "cannot open local state {path}: {source} (is another `streamc run` of `{app}` using this state directory?)"
    )]
    Locked {
        path: String,
        app: String,
        #[source]
        source: sled::Error,
    },
    /// A file of the state directory: `doing` says what could not be done.
    #[error("{doing}: {source}")]
    Io {
        doing: String,
        #[source]
        source: std::io::Error,
    },
    /// A record the program cannot process, with `on_error: fail`: where it is and why.
    #[error("{0}")]
    BadRecord(String),
    /// An input file (`--input`) that cannot be ingested as it is.
    #[error("{0}")]
    Input(String),
    /// The schema registry: down (the run stops and resumes from its last commit when run
    /// again: nothing is lost), or it refused a sink's schema.
    #[error("{0}")]
    Registry(String),
    /// A failure of the process itself: a worker thread that panicked, a poisoned lock.
    #[error("{0}")]
    Internal(&'static str),
    /// Committed state that this program cannot run on (written without tenant scoping, …).
    #[error("{0}")]
    Incompatible(String),
    /// The control log: trusted keys, the program as statements left it.
    #[error(transparent)]
    Control(#[from] crate::control::ControlError),
    /// A backend's own error (the Kafka backend's `kafka::BrokerError`), as it says it.
    #[error(transparent)]
    Backend(Box<dyn std::error::Error + Send + Sync>),
}

/// A sled error while doing `doing`.
pub(crate) fn state(doing: impl Into<String>) -> impl FnOnce(sled::Error) -> RunError {
    let doing = doing.into();
    move |source| RunError::State { doing, source }
}

/// The backends still pass their own errors as text.
impl From<RunError> for String {
    fn from(e: RunError) -> String {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages are the text the runtime printed before its errors were typed.
    #[test]
    fn messages_say_what_was_being_done_as_before() {
        let e = state("cannot open store q-aggregate")(sled::Error::Unsupported("no".into()));
        assert_eq!(e.to_string(), format!("cannot open store q-aggregate: {}", sled::Error::Unsupported("no".into())));
        let e =
            RunError::Locked { path: "/s".into(), app: "app".into(), source: sled::Error::Unsupported("held".into()) };
        assert_eq!(
            e.to_string(),
            format!(
                "cannot open local state /s: {} (is another `streamc run` of `app` using this state directory?)",
                sled::Error::Unsupported("held".into())
            )
        );
        let text: String = RunError::Incompatible("q: its state was written without tenant scoping".into()).into();
        assert_eq!(text, "q: its state was written without tenant scoping");
    }
}
