//! `streamc trace` on the embedded log (the scenarios are in tests/common/trace.rs;
//! tests/kafka_trace.rs runs some on the broker): each traced result's inputs against a fold
//! written in the test.

mod common;

use common::embedded::temp_dir;

#[test]
fn a_hopping_windows_result_came_from_the_first_n_trades_of_its_window() {
    let dir = temp_dir("trace-hopping");
    common::trace::hopping(dir.path(), &[], "t", "stats");
}

#[test]
fn a_sliding_windows_result_came_from_the_first_n_trades_of_its_window_its_earlier_ones_too() {
    let dir = temp_dir("trace-sliding");
    common::trace::sliding(dir.path(), &[], "t", "slides");
}

#[test]
fn a_sessions_result_came_from_every_trade_of_the_sessions_it_merged() {
    let dir = temp_dir("trace-sessions");
    common::trace::sessions(dir.path(), &[], "t", "sessions");
}

#[test]
fn a_joined_result_came_from_its_trade_and_the_tables_row_as_of_then() {
    let dir = temp_dir("trace-join");
    common::trace::join(dir.path(), &[], "t", "named");
}

#[test]
fn a_stream_stream_joins_result_came_from_the_two_records_it_paired() {
    let dir = temp_dir("trace-windowed-join");
    common::trace::windowed_join(dir.path(), &[], "t", "visits");
}

#[test]
fn a_table_table_joins_result_came_from_each_tables_row_as_of_then() {
    let dir = temp_dir("trace-table-join");
    common::trace::table_join(dir.path(), &[], "t", "valued");
}

#[test]
fn a_table_aggregates_result_came_from_the_current_rows_of_its_group() {
    let dir = temp_dir("trace-table-aggregate");
    common::trace::table_aggregate(dir.path(), &[], "t", "regions");
}

#[test]
fn a_regrouped_aggregates_result_came_from_the_first_trades_of_its_group_of_each_partition() {
    let dir = temp_dir("trace-regrouped");
    common::trace::regrouped(dir.path(), &[], "t", "buckets");
}

#[test]
fn a_result_of_a_chained_query_is_traced_back_to_the_external_inputs() {
    let dir = temp_dir("trace-chain");
    common::trace::chain(dir.path(), &[], "t", "chain");
}

#[test]
fn what_trace_cannot_do_is_refused_with_the_reason() {
    let dir = temp_dir("trace-refusals");
    common::trace::refusals(dir.path(), &[], "t", "refused");
}
