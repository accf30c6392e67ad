import CampaignTLS

/// Token authentication as the HTTP/2 protocol asks for it (pushy's
/// `TokenAuthenticationApnsClientHandler`: token auth as a small override
/// of one connection handler): the token a new connection's requests carry
/// in their `authorization` field, how many streams it may open before a
/// request succeeds, and what an `ExpiredProviderToken` answer means. A
/// send with a certificate has none.
package struct TokenAuthorization {
    package let source: ProviderTokenSource
    package let clock: SendClock

    package init(source: ProviderTokenSource, clock: SendClock) {
        (self.source, self.clock) = (source, clock)
    }

    /// What an `ExpiredProviderToken` answer leads to.
    package enum AfterExpiry {
        /// Send it again with this token.
        case renewed(ProviderToken)
        /// The token is younger than APNs allows renewing (20 minutes): the
        /// clock of this machine is wrong, and sending again would only earn
        /// 429 TooManyProviderTokenUpdates. `age` in seconds.
        case tooYoungToRenew(age: Int64)
    }

    /// The token a new connection uses (renewed once 50 minutes old).
    package func tokenForNewConnection() -> ProviderToken { source.current(now: Int64(clock.wallSeconds)) }

    /// The request field carrying `token`.
    package static func field(_ token: ProviderToken) -> (name: String, value: String) { ("authorization", "bearer " + token.text) }

    /// Apple holds a token connection to one stream until a request on it succeeds (more would only be refused).
    package static let streamsBeforeFirstSuccess = 1

    /// APNs refused `used` as one update too many (429 TooManyProviderTokenUpdates):
    /// another process's token for the key, found in a shared cache, or nil (none to take).
    package func refusedAsTooManyUpdates(_ used: ProviderToken) -> ProviderToken? {
        let other = source.refusedAsTooManyUpdates(used, now: Int64(clock.wallSeconds))
        return other.text != used.text ? other : nil
    }

    package var keyID: String { source.keyIdentifier }

    /// APNs said `used` has expired.
    package func expired(_ used: ProviderToken) -> AfterExpiry {
        let now = Int64(clock.wallSeconds)
        let renewed = source.expired(used, now: now)
        return renewed.text != used.text ? .renewed(renewed) : .tooYoungToRenew(age: now - used.issuedAt)
    }
}
