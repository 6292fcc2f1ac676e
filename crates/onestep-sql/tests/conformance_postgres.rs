//! The execution conformance suite on postgres (a real server; see tests/support).

mod support;

onestep_testkit::execution_conformance!(support::postgres());
