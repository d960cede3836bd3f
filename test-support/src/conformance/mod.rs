//! One conformance suite that every engine must pass: the behaviour tests that are about an
//! engine (its globals, its lifecycle, its limits, its error texts), written once and run against
//! each engine.
//!
//! An engine crate instantiates it in one test file:
//!
//! ```ignore
//! codemode_test_support::conformance_suite!(my_subject());
//! ```
//!
//! where `my_subject()` is a [`Subject`]: the engine under test, how to make its variants, and the
//! [`Difference`]s it is known to have, each with its reason. A test listed as a difference still
//! runs, and must still fail: when it passes, the suite says to remove it from the list. Nothing
//! is skipped silently.
//!
//! The tests are plain functions of the modules [`builtins`], [`globals`], [`lifecycle`] and
//! [`limits`]; the macro lists every one of them (a unit test checks that the list is complete).

pub mod builtins;
pub mod globals;
pub mod harness;
pub mod lifecycle;
pub mod limits;
mod subject;

pub use subject::{Dialect, Difference, Subject, check, subject};

/// Every conformance test, as `module::test`.
#[macro_export]
#[doc(hidden)]
macro_rules! __conformance_tests {
    ($subject:expr) => {
        $crate::__conformance_instantiate!($subject;
        globals::text_uses_string_for_primitives_and_json_for_everything_else,
        globals::a_throwing_to_json_surfaces_as_the_cells_error,
        globals::image_accepts_data_urls_objects_and_mcp_blocks_with_detail_overrides,
        globals::image_refusals_are_thrown_as_errors_the_cell_can_catch,
        globals::generated_image_emits_the_image_then_its_output_hint,
        globals::audio_accepts_data_urls_and_mcp_blocks_and_refuses_remote_urls,
        globals::store_and_load_share_values_within_the_cell_as_deep_copies,
        globals::store_refuses_values_without_a_json_form,
        globals::notify_delivers_text_to_the_host_and_refuses_blank_text,
        globals::yield_control_asks_the_observer_to_yield_and_the_script_goes_on,
        globals::exit_ends_the_script_successfully_and_cannot_be_caught,
        globals::exit_inside_an_async_function_and_a_timer_also_ends_the_script,
        globals::timers_fire_in_order_with_arguments_and_can_be_cleared,
        globals::timer_arguments_are_normalised_and_refused_as_s2_says,
        globals::pending_timers_do_not_keep_a_finished_cell_alive,
        globals::a_throwing_timer_callback_fails_the_cell,
        globals::forbidden_globals_are_absent,
        globals::all_tools_lists_the_enabled_tools_by_global_name_with_their_declarations,
        globals::search_tools_finds_tools_by_every_word_of_the_query,
        globals::imports_are_refused_static_and_dynamic,
        globals::errors_carry_the_stack_with_line_and_column,
        globals::syntax_errors_name_line_and_column,
        globals::a_thrown_non_error_becomes_its_string,
        globals::the_array_copy_methods_leave_the_array_alone,
        globals::group_by_groups_by_the_callback_s_key,
        globals::promise_with_resolvers_and_array_from_async_work,
        globals::intl_works_with_the_system_icu,
        globals::a_cell_that_overwrites_built_ins_cannot_break_its_own_globals,
        globals::the_host_entry_point_is_not_reachable_from_the_cell,
        globals::a_lone_surrogate_in_text_becomes_one_replacement_character,
        globals::store_refuses_lone_surrogates_by_key_and_reason_so_keys_never_collide,
        globals::a_tool_argument_with_a_lone_surrogate_is_refused_with_the_reason,
        globals::any_thrown_value_is_rendered_by_the_engine_with_its_position_when_it_has_one,
        globals::an_unmarked_throw_in_a_callback_keeps_its_position,
        globals::a_cell_cannot_hide_or_rewrite_its_error_text,
        globals::exit_inside_to_json_stops_the_text_that_called_it,
        globals::a_replaced_array_iterator_breaks_none_of_the_globals,
        lifecycle::a_tool_call_is_answered_with_its_json_result,
        lifecycle::a_failed_tool_rejects_its_promise_with_the_error_text,
        lifecycle::an_unserialisable_tool_argument_rejects_without_calling_the_tool,
        lifecycle::two_tool_calls_run_in_parallel_with_promise_all,
        lifecycle::a_cell_terminated_while_its_tool_call_is_unanswered_ends_without_a_result,
        lifecycle::terminate_stops_a_synchronous_infinite_loop,
        lifecycle::terminate_stops_a_microtask_loop,
        lifecycle::terminate_stops_a_spin_loop_inside_a_timer_callback,
        lifecycle::terminate_before_the_cell_runs_means_none_of_its_javascript_runs,
        lifecycle::a_terminate_handle_is_harmless_after_its_cell_has_ended,
        lifecycle::pending_is_emitted_only_while_the_cell_waits_on_tools_or_timers,
        lifecycle::a_paused_cell_runs_nothing_until_resumed,
        lifecycle::resume_pauses_at_every_frontier_and_continue_stops_pausing_until_asked,
        lifecycle::terminate_reaches_a_paused_cell,
        lifecycle::a_host_fired_timeout_runs_the_timer_early,
        lifecycle::dropping_every_sender_ends_an_idle_cell,
        lifecycle::awaiting_a_promise_nothing_can_settle_fails_at_once,
        lifecycle::a_panic_on_the_runtime_thread_is_reported_and_the_process_lives_on,
        lifecycle::thirty_two_cells_run_in_parallel_threads_with_their_own_globals,
        lifecycle::an_engine_without_warm_runtimes_creates_each_runtime_when_its_cell_starts,
        lifecycle::a_pool_of_one_warm_runtime_serves_cell_after_cell,
        lifecycle::a_burst_larger_than_the_pool_falls_back_to_cold_runtimes,
        lifecycle::a_cell_reports_its_cpu_time_just_before_its_result,
        limits::an_array_allocation_bomb_ends_the_cell_with_heap_limit_exceeded,
        limits::an_object_allocation_bomb_ends_the_cell_with_heap_limit_exceeded,
        limits::a_string_building_bomb_ends_the_cell_with_heap_limit_exceeded,
        limits::array_buffers_count_against_the_heap_limit,
        limits::unbounded_recursion_ends_the_cell_with_a_range_error,
        limits::a_heap_limit_below_the_minimum_is_refused_before_a_thread_starts,
        limits::a_spin_loop_is_ended_by_the_cpu_time_limit_with_an_error_naming_it,
        limits::waiting_uses_no_cpu_time_budget,
        limits::formatting_an_error_runs_no_cell_code_so_a_spinning_getter_cannot_mask_it,
        limits::a_cpu_limit_that_lands_while_a_rejection_is_pending_reports_the_limit,
        limits::a_typed_array_bomb_ends_the_cell_at_the_heap_limit,
        limits::large_strings_end_the_cell_with_heap_limit_exceeded,
        limits::running_out_of_heap_while_a_tool_call_is_unanswered_ends_the_cell,
        limits::a_promise_job_that_throws_rejects_only_its_own_promise,
        builtins::array_find_last_and_the_copying_methods_leave_the_array_alone,
        builtins::symbols_are_weak_map_keys,
        builtins::strings_say_whether_they_are_well_formed_and_repair_lone_surrogates,
        builtins::set_methods_combine_and_compare_sets_and_set_likes,
        builtins::iterator_helpers_are_lazy_and_close_what_they_leave,
        builtins::the_iterator_global_wraps_iterators_and_can_be_extended,
        builtins::promise_try_turns_a_throw_or_a_value_into_a_promise,
        builtins::regexp_escape_makes_any_string_a_literal_pattern,
        builtins::array_buffers_resize_and_transfer,
        builtins::regexps_take_the_v_flag_duplicate_group_names_and_modifiers,
        builtins::float16_arrays_round_to_half_precision,
        builtins::using_declarations_dispose_at_the_end_of_their_block,
        );
    };
}

/// Instantiates the conformance suite for the engine `$subject` (a
/// [`Subject`](crate::conformance::Subject)): one `#[test]`
/// per conformance test.
#[macro_export]
macro_rules! conformance_suite {
    ($subject:expr) => {
        $crate::__conformance_tests!($subject);
    };
}

#[macro_export]
#[doc(hidden)]
macro_rules! __conformance_instantiate {
    ($subject:expr; $($module:ident :: $test:ident,)*) => {
        $(
            #[test]
            fn $test() {
                $crate::conformance::check(
                    $subject,
                    stringify!($test),
                    $crate::conformance::$module::$test,
                );
            }
        )*
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_suite_lists_every_conformance_test() {
        let listed = include_str!("mod.rs");
        for (module, source) in [
            ("builtins", include_str!("builtins.rs")),
            ("globals", include_str!("globals.rs")),
            ("lifecycle", include_str!("lifecycle.rs")),
            ("limits", include_str!("limits.rs")),
        ] {
            for line in source.lines() {
                let Some(rest) = line.strip_prefix("pub fn ") else {
                    continue;
                };
                let Some(name) = rest.strip_suffix("() {") else {
                    continue;
                };
                assert!(
                    listed.contains(&format!("{module}::{name},")),
                    "conformance test {module}::{name} is missing from __conformance_tests!"
                );
            }
        }
    }
}
