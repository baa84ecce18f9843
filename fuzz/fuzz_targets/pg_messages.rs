//! Bytes a client sends on a fresh pgwire connection and after startup: every frontend
//! message decoder (SSLRequest, GSSENCRequest, Startup, CancelRequest, then Query, Parse, Bind,
//! Execute, ...) must return a message, "need more bytes" or an error — never panic, hang or
//! allocate without bound (pgwire caps message lengths).
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use pgwire::messages::{DecodeContext, PgWireFrontendMessage, ProtocolVersion};

fuzz_target!(|data: &[u8]| {
    for (ssl, startup) in [(true, true), (false, true), (false, false)] {
        let mut ctx = DecodeContext::new(ProtocolVersion::default());
        ctx.awaiting_frontend_ssl = ssl;
        ctx.awaiting_frontend_startup = startup;
        let mut buf = BytesMut::from(data);
        // Decode message after message until the input is used up or rejected.
        for _ in 0..64 {
            match PgWireFrontendMessage::decode(&mut buf, &ctx) {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
});
