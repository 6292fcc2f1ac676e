//! The execution conformance suite on sqlite (a real server; see tests/support).

mod support;

onestep_testkit::execution_conformance!(support::sqlite());
