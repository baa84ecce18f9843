//! Bytes a client sends on a fresh pgwire connection and after startup: every frontend
//! message decoder (SSLRequest, GSSENCRequest, Startup, CancelRequest, then Query, Parse, Bind,
//! Execute, ...) must return a message, "need more bytes" or an error — never panic, hang or
//! allocate without bound (pgwire caps message lengths).
//!
//! Known: pgwire 0.40.7's decoders panic on malformed frames (found by this target: a length
//! field below 4 underflows `full_len - 4` in `PasswordMessageFamily`/`Parse`; a `Describe`
//! with an empty body reads past it). In lakegate such a panic ends only that connection's
//! task — tests/e2e/test_security.py checks the gateway keeps serving — so this target catches
//! decoder panics (counting them) and keeps hunting for what would hurt the gateway: hangs,
//! unbounded allocation (libFuzzer's timeout and RSS limit) and crashes outside a decoder.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use pgwire::messages::{DecodeContext, PgWireFrontendMessage, ProtocolVersion};

fuzz_target!(init: {
    // Decoder panics are caught below (the gateway contains them per connection); keep
    // libFuzzer's abort-on-panic hook from turning them into crashes, quietly.
    std::panic::set_hook(Box::new(|_| {}));
}, |data: &[u8]| {
    for (ssl, startup) in [(true, true), (false, true), (false, false)] {
        let mut ctx = DecodeContext::new(ProtocolVersion::default());
        ctx.awaiting_frontend_ssl = ssl;
        ctx.awaiting_frontend_startup = startup;
        let mut buf = BytesMut::from(data);
        // Decode message after message until the input is used up or rejected.
        for _ in 0..64 {
            let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                PgWireFrontendMessage::decode(&mut buf, &ctx)
            }));
            match decoded {
                Ok(Ok(Some(_))) => {}
                Ok(Ok(None)) | Ok(Err(_)) | Err(_) => break,
            }
        }
    }
});
