//! Servers that xtask starts for one run and stops afterwards, when none is configured or
//! answering locally (or `--throwaway-servers` asks for them).

pub mod mariadb;
pub mod postgres;
pub mod rabbitmq;
pub mod redis;
pub mod sqs;
