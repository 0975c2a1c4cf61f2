//! One HTTP connection, bytes in and bytes out, through the listener's own
//! connection handling: HTTP/1.1 requests and bodies, WebSocket upgrades
//! and the frames after them, the HTTP/2 preface, into a fresh gateway.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use map_config::Config;
use map_core::Gateway;

/// How long one connection may take once its peer has sent everything and
/// closed its side; longer is a hang.
const DEADLINE: Duration = Duration::from_secs(10);

/// The connection ends once the peer closes its side, and what the gateway
/// wrote is HTTP.
pub fn connection(data: &[u8]) {
    let output = super::runtime::block_on(async {
        let gw = Gateway::new(Config::default());
        let (client, server) = tokio::io::duplex(1 << 20);
        let peer = "127.0.0.1:40000".parse().expect("a socket address");
        let serving = tokio::spawn(crate::transport::serve_stream(gw, peer, server));
        let (mut rd, mut wr) = tokio::io::split(client);
        let write = async {
            let _ = wr.write_all(data).await;
            let _ = wr.shutdown().await;
        };
        let mut output = Vec::new();
        let exchange = async { tokio::join!(write, rd.read_to_end(&mut output)) };
        let ((), read) = tokio::time::timeout(DEADLINE, exchange).await.expect("the connection ended after its peer closed");
        read.expect("the gateway's side reads to its end");
        tokio::time::timeout(DEADLINE, serving).await.expect("the connection task ended").expect("the connection task did not panic");
        output
    });
    if !output.is_empty() {
        let h2_settings = output.len() >= 9 && output[3] == 4;
        // An HTTP/1.0 request is answered in HTTP/1.0.
        assert!(
            output.starts_with(b"HTTP/1.1 ") || output.starts_with(b"HTTP/1.0 ") || h2_settings,
            "not an HTTP answer: {:?}",
            String::from_utf8_lossy(&output[..output.len().min(200)])
        );
    }
}
