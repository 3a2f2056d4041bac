//! Every generated message type of kafkit-protocol decoded from arbitrary bytes.
//!
//! Input: `kind: u8`, `key: i16`, `version: i16`, then the body.
//! - kind % 4 == 0: the request with API key `key`, decoded at `version`;
//! - 1: its response;
//! - 2: a whole response frame body (response header and response) for that request, as the
//!   connection reads it (`decode_response_frame`);
//! - 3: message number `key` of `for_each_message!` (headers and data schemas included).
//!
//! Each decoded value goes through `kafkit_fuzz::check_message` (re-encode, size, equality).
#![no_main]

use bytes::Bytes;
use kafkit_fuzz::{check_message, take_u8, take_u16};
use kafkit_protocol::{Request, decode_response_frame};
use libfuzzer_sys::fuzz_target;

fn by_api_key(kind: u8, key: i16, version: i16, body: &[u8]) {
    macro_rules! dispatch {
        ($module:ident, $req:ident, $resp:ident) => {
            if key == <kafkit_protocol::messages::$req as Request>::API_KEY as i16 {
                match kind {
                    0 => check_message::<kafkit_protocol::messages::$req>(body, version),
                    1 => check_message::<kafkit_protocol::messages::$resp>(body, version),
                    _ => {
                        let _ = decode_response_frame::<kafkit_protocol::messages::$req>(
                            Bytes::copy_from_slice(body),
                            version,
                        );
                    }
                }
                return;
            }
        };
    }
    kafkit_protocol::for_each_request!(dispatch);
}

fn by_index(index: u16, version: i16, body: &[u8]) {
    let mut n: u16 = 0;
    macro_rules! nth {
        ($module:ident, $ty:ident) => {
            if n == index {
                check_message::<kafkit_protocol::messages::$ty>(body, version);
                return;
            }
            n += 1;
        };
    }
    kafkit_protocol::for_each_message!(nth);
    // Past the end: wrap around once.
    if n > 0 && index >= n {
        by_index(index % n, version, body);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut d = data;
    let kind = take_u8(&mut d) % 4;
    let key = take_u16(&mut d);
    let version = take_u16(&mut d) as i16;
    if kind == 3 {
        by_index(key, version, d);
    } else {
        by_api_key(kind, key as i16, version, d);
    }
});
