//! The runtime: tasks that execute a [`crate::plan::Topology`] over a log, with state in sled.

pub mod eval;
pub mod value;
pub mod driver;
pub mod task;
pub mod tenant;
pub mod metrics;
pub mod chaos;
pub mod kafka_driver;
pub(crate) mod hub;
