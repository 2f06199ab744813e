//! The runtime: tasks that execute a [`crate::plan::Topology`] over a log, with state in sled.

pub mod chaos;
mod commit;
pub mod driver;
pub(crate) mod hub;
pub mod kafka_driver;
pub mod metrics;
pub mod options;
pub mod task;
pub mod tenant;
pub mod topics;
