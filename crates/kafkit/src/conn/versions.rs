//! Version negotiation: the version to send each API at, the highest both this client (its
//! table, [`crate::ops::versions`]) and the broker speak. Read by [`Conn::version_for`].
//!
//! [`Conn::version_for`]: super::Conn::version_for

use kafkit_protocol::{Request, VersionRange};

use crate::error::{Error, Result};
use crate::ops::versions::{client_max, client_max_for};

/// The version to send `R` at: the highest in both the client's range (up to its table entry,
/// capped at `cap`) and `broker`'s (`None`: the broker does not offer the API).
///
/// # Errors
///
/// [`Error::UnsupportedVersion`] naming the API and both ranges when they do not overlap.
pub(crate) fn choose<R: Request>(broker: Option<VersionRange>, cap: Option<i16>) -> Result<i16> {
    let max = client_max_for::<R>();
    let ours = VersionRange {
        min: R::VERSIONS.min,
        max: cap.map_or(max, |c| c.min(max)),
    };
    broker
        .and_then(|b| b.intersect(&ours))
        .map(|r| r.max)
        .ok_or(Error::UnsupportedVersion {
            api: R::API_KEY,
            ours,
            broker,
        })
}

/// [`choose`] with the unstable opt-in ([`crate::DialerBuilder::unstable_api_versions`], Java's
/// `unstable.api.versions.enable`): an API whose table entry is its latest stable version may go
/// on to the versions the schema marks `latestVersionUnstable` (up to `R::VERSIONS.max`); every
/// other API keeps its table entry, since the client does not yet fill what the newer stable
/// versions add. Without the opt-in this is [`choose`].
///
/// # Errors
///
/// As [`choose`].
pub(crate) fn choose_opt_in<R: Request>(
    broker: Option<VersionRange>,
    cap: Option<i16>,
    unstable: bool,
) -> Result<i16> {
    let at_stable_top = client_max(R::API_KEY).is_some_and(|v| v >= R::LATEST_STABLE_VERSION);
    if !unstable || !at_stable_top || R::VERSIONS.max <= R::LATEST_STABLE_VERSION {
        return choose::<R>(broker, cap);
    }
    let ours = VersionRange {
        min: R::VERSIONS.min,
        max: cap.map_or(R::VERSIONS.max, |c| c.min(R::VERSIONS.max)),
    };
    broker
        .and_then(|b| b.intersect(&ours))
        .map(|r| r.max)
        .ok_or(Error::UnsupportedVersion {
            api: R::API_KEY,
            ours,
            broker,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the client negotiates with a broker that offers every version the generated code
    /// has (Kafka 4.4 and above, unstable versions enabled) is the table, for every request.
    #[test]
    fn negotiation_follows_the_table() {
        let mut n = 0;
        macro_rules! check {
            ($module:ident, $req:ident, $resp:ident) => {{
                type Q = kafkit_protocol::messages::$req;
                let all = <Q as kafkit_protocol::Message>::VERSIONS;
                let chosen = choose::<Q>(Some(all), None).unwrap();
                assert_eq!(Some(chosen), client_max(Q::API_KEY), "{}", Q::API_KEY);
                // A cap below the table wins; a broker short of the table is followed.
                assert_eq!(choose::<Q>(Some(all), Some(all.min)).unwrap(), all.min);
                let short = VersionRange::new(all.min, all.min);
                assert_eq!(choose::<Q>(Some(short), None).unwrap(), all.min);
                assert!(choose::<Q>(None, None).is_err());
                n += 1;
            }};
        }
        kafkit_protocol::for_each_request!(check);
        assert_eq!(n, kafkit_protocol::ApiKey::ALL.len());
    }

    /// The unstable opt-in: InitProducerId v6 (unstable in 4.4) only with it, and only where the
    /// broker offers it; APIs without unstable versions are unchanged either way.
    #[test]
    fn unstable_versions_only_with_the_opt_in() {
        use kafkit_protocol::Message;
        use kafkit_protocol::messages::{InitProducerIdRequest, ProduceRequest};
        let all = InitProducerIdRequest::VERSIONS;
        assert_eq!(all.max, 6);
        assert_eq!(InitProducerIdRequest::LATEST_STABLE_VERSION, 5);
        assert_eq!(
            choose_opt_in::<InitProducerIdRequest>(Some(all), None, false).unwrap(),
            5
        );
        assert_eq!(
            choose_opt_in::<InitProducerIdRequest>(Some(all), None, true).unwrap(),
            6
        );
        // A broker without the unstable version, and a cap, are still followed.
        let stable = VersionRange::new(0, 5);
        assert_eq!(
            choose_opt_in::<InitProducerIdRequest>(Some(stable), None, true).unwrap(),
            5
        );
        assert_eq!(
            choose_opt_in::<InitProducerIdRequest>(Some(all), Some(4), true).unwrap(),
            4
        );
        assert!(choose_opt_in::<InitProducerIdRequest>(None, None, true).is_err());
        // Produce has no unstable version, and its table entry is below its latest stable one.
        let produce = ProduceRequest::VERSIONS;
        assert_eq!(
            choose_opt_in::<ProduceRequest>(Some(produce), None, true).unwrap(),
            choose::<ProduceRequest>(Some(produce), None).unwrap()
        );
    }
}
