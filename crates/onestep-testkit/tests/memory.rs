//! The execution conformance suite on the in-memory backend.

onestep_testkit::execution_conformance!(onestep_testkit::MemoryFactory::default());
