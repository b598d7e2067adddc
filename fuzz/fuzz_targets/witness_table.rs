//! libFuzzer entry point of `ebof_fuzz::targets::witness_table` (see that module for the input
//! format and what is checked).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ebof_fuzz::targets::witness_table::run(data, &mut ebof_fuzz::Features::default());
});
