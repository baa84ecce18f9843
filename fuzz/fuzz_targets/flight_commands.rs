//! What a Flight SQL client puts in a FlightDescriptor's command or a Ticket: a protobuf `Any`
//! lakegate decodes into a Flight SQL command. Decoding must never panic.
#![no_main]

use arrow_flight::sql::{Any, Command};
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    if let Ok(any) = Any::decode(data) {
        let _ = Command::try_from(any);
    }
    let _ = arrow_flight::FlightDescriptor::decode(data);
    let _ = arrow_flight::Ticket::decode(data);
});
