#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! `onestep run` of the shipped `examples/sqs-worker.yaml`, unchanged, against the SQS and SNS
//! emulator (`ONESTEP_SQS_URL`, which `cargo xtask test` provides, else moto's default at
//! 127.0.0.1:5000), configured only through the variables the file reads and the SDK's own
//! `AWS_*` environment: messages sent in the reference's wire format are handled, published to
//! the SNS topic, reach a queue subscribed to it unchanged, and are deleted from the jobs queue;
//! SIGTERM stops the worker cleanly.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use onestep_sqs::aws_sdk_sqs::types::QueueAttributeName;
use onestep_sqs::{AwsSettings, SnsConnector, SqsConnector};

fn endpoint() -> String {
    std::env::var("ONESTEP_SQS_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:5000".into())
        .trim_end_matches('/')
        .to_owned()
}

fn settings() -> AwsSettings {
    AwsSettings::new()
        .with_region("us-east-1")
        .with_endpoint_url(endpoint())
        .with_credentials("testing", "testing-secret", None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqs_example_runs_on_the_binary() {
    let sqs = SqsConnector::new(settings())
        .unwrap()
        .client("cli")
        .await
        .unwrap();
    let sns = SnsConnector::new(settings())
        .unwrap()
        .client("cli")
        .await
        .unwrap();
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let create = |name: String| {
        let sqs = sqs.clone();
        async move {
            sqs.create_queue()
                .queue_name(name)
                .send()
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "the SQS emulator at {} does not answer ({e}); run `cargo xtask test`",
                        endpoint()
                    )
                })
                .queue_url()
                .unwrap()
                .to_owned()
        }
    };
    let jobs = create(format!("cli-jobs-{suffix}")).await;
    let done = create(format!("cli-done-{suffix}")).await;
    let done_arn = sqs
        .get_queue_attributes()
        .queue_url(&done)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes()
        .unwrap()[&QueueAttributeName::QueueArn]
        .clone();
    let topic = sns
        .create_topic()
        .name(format!("cli-done-{suffix}"))
        .send()
        .await
        .unwrap()
        .topic_arn()
        .unwrap()
        .to_owned();
    sns.subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint(&done_arn)
        .attributes("RawMessageDelivery", "true")
        .send()
        .await
        .unwrap();
    const N: usize = 20;
    for i in 0..N {
        sqs.send_message()
            .queue_url(&jobs)
            .message_body(format!(
                r#"{{"body": {{"id": {i}, "text": "\u00e9"}}, "meta": {{"from": "cli"}}, "attempts": 0}}"#
            ))
            .send()
            .await
            .unwrap();
    }

    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sqs-worker.yaml");
    let mut worker = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args(["run", example.to_str().unwrap()])
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing-secret")
        .env("SQS_ENDPOINT", endpoint())
        .env("SNS_ENDPOINT", endpoint())
        .env("JOBS_QUEUE_URL", &jobs)
        .env("DONE_TOPIC_ARN", &topic)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let mut bodies = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while bodies.len() < N {
        assert!(
            Instant::now() < deadline,
            "only {} of {N} published",
            bodies.len()
        );
        let got = sqs
            .receive_message()
            .queue_url(&done)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        for m in got.messages() {
            bodies.push(m.body().unwrap().to_owned());
            sqs.delete_message()
                .queue_url(&done)
                .receipt_handle(m.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
    }
    let status = Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exited = worker.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(worker.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(exited.success(), "{exited}: {stderr}");
    for body in &bodies {
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["body"]["text"], "é", "{body}");
        assert!(body.is_ascii(), "the reference's bytes: {body}");
    }
    // Every job was deleted (the worker flushed its last deletes on SIGTERM).
    let left = sqs
        .get_queue_attributes()
        .queue_url(&jobs)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap();
    let attrs = left.attributes().unwrap();
    assert_eq!(attrs[&QueueAttributeName::ApproximateNumberOfMessages], "0");
    assert_eq!(
        attrs[&QueueAttributeName::ApproximateNumberOfMessagesNotVisible],
        "0"
    );
}
