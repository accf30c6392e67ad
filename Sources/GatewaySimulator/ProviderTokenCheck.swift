import CampaignTLS

/// Token authentication on one connection, as APNs checks it: an ES256 JWT
/// whose `kid` names a key the simulator holds, signed by it, with a team id
/// as `iss`, issued no longer ago than the token lifetime; and no more than
/// one new token per connection per 20 minutes.
struct ProviderTokenCheck {
    /// Public keys by key id (`--auth-keys DIR`: `<KID>.pem`).
    let keys: [String: PublicKey]
    let lifetimeSeconds: Int64
    /// Least time between two tokens on one connection.
    static let refreshSeconds: Int64 = 20 * 60
    private var current: (text: String, issuedAt: Int64, installedAt: Int64)?

    init(keys: [String: PublicKey], lifetimeSeconds: Int64) {
        self.keys = keys
        self.lifetimeSeconds = lifetimeSeconds
    }

    /// Whether a valid token has been seen on this connection.
    var hasValidToken: Bool { current != nil }

    /// The answer to a request's `authorization` header, or nil when it is valid.
    mutating func check(_ header: String?, now: Int64) -> H2Reply? {
        guard let header, header.lowercased().hasPrefix("bearer ") else { return H2Reply(status: 403, reason: "MissingProviderToken") }
        let token = String(header.dropFirst("bearer ".count))
        if let current, token == current.text {
            return now - current.issuedAt > lifetimeSeconds ? H2Reply(status: 403, reason: "ExpiredProviderToken") : nil
        }
        guard let claims = ProviderToken.claims(of: token), claims.alg == "ES256", let key = keys[claims.keyID],
              claims.teamID.count == 10, claims.teamID.allSatisfy({ $0.isLetter || $0.isNumber }),
              ProviderToken.verify(token, publicKey: key) else {
            return H2Reply(status: 403, reason: "InvalidProviderToken")
        }
        if now - claims.issuedAt > lifetimeSeconds { return H2Reply(status: 403, reason: "ExpiredProviderToken") }
        if claims.issuedAt > now + 60 { return H2Reply(status: 403, reason: "InvalidProviderToken") }
        if let current, now - current.installedAt < Self.refreshSeconds {
            return H2Reply(status: 429, reason: "TooManyProviderTokenUpdates")
        }
        current = (token, claims.issuedAt, now)
        return nil
    }
}
