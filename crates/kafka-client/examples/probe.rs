#[tokio::main(flavor = "current_thread")]
async fn main() {
    let addr = std::env::args().nth(1).unwrap();
    let d = kafka_client::Dialer::builder().sasl(kafka_client::kafka_sasl::Plain::new("alice", "pw")).build();
    let r = d.dial(&addr).await;
    println!("{r:?}");
    if let Ok(c) = r { println!("lifetime {} md {:?}", c.sasl_session_lifetime_ms(), c.metadata(None).await.map(|m| m.brokers.len())); }
}
