//! The runtime: tasks that execute a [`crate::plan::Topology`] over a log, with state in sled.
//!
//! The core — a task and its steps ([`run`]), its commit protocol ([`commit`]), local state
//! ([`state`]) and restore ([`restore`]) — is written once; [`embedded`] and [`kafka`] are the
//! two backends, each in a folder of its own, and neither imports the other.

pub(crate) mod agg;
pub(crate) mod backend;
pub(crate) mod bin;
pub mod chaos;
pub mod console;
pub mod embedded;
pub mod error;
pub(crate) mod foreign;
pub mod http;
pub(crate) mod hub;
pub mod kafka;
pub(crate) mod key_filter;
pub mod lineage;
pub mod metrics;
pub(crate) mod op;
pub(crate) mod ops;
pub mod options;
pub(crate) mod pages;
pub(crate) mod pending;
mod placement;
pub mod query;
pub(crate) mod restore;
pub(crate) mod run;
pub mod schemas;
pub(crate) mod state;
pub(crate) mod stream_join;
pub(crate) mod tables;
pub mod task;
pub mod tenant;
pub mod topics;
pub(crate) mod window;
pub(crate) mod wire;
pub(crate) mod writer;

pub use error::RunError;
pub use placement::{value_record, LinePlacer};
pub use run::{now_ms, Summary};

/// An application's own directory in a state directory: `<state-dir>/apps/<app>` (its local
/// state, its instance name on Kafka, the address it serves queries on).
pub fn app_dir(state_dir: &std::path::Path, app: &str) -> std::path::PathBuf {
    state_dir.join("apps").join(app)
}

/// An application's local state (sled, a cache of its changelogs): `<state-dir>/apps/<app>/state`.
pub fn local_state_path(state_dir: &std::path::Path, app: &str) -> std::path::PathBuf {
    app_dir(state_dir, app).join("state")
}
