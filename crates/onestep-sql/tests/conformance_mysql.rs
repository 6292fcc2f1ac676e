//! The execution conformance suite on mysql (a real server; see tests/support).

mod support;

onestep_testkit::execution_conformance!(support::mysql());
