import CampaignIO
import CampaignTLS

/// The tokens the simulator has taken, over every connection, per key:
/// APNs refuses a key's new token that comes sooner than `minimumInterval`
/// after its previous new one, however many connections or processes sign
/// them (`--token-min-interval`). A token already taken stays good (until
/// it expires). Thread-safe.
public final class ProviderTokenRegistry: @unchecked Sendable {
    public let minimumInterval: Int64
    private let lock = Lock()
    /// Per key id: the tokens taken, and when the newest was first taken.
    private var keys: [String: (taken: Set<String>, lastNewAt: Int64)] = [:]

    public init(minimumInterval: Int64) { self.minimumInterval = minimumInterval }

    /// Whether `token` (valid, of `keyID`) may be used now.
    func admit(token: String, keyID: String, now: Int64) -> Bool {
        lock.withLock {
            if let key = keys[keyID] {
                if key.taken.contains(token) { return true }
                guard now - key.lastNewAt >= minimumInterval else { return false }
            }
            keys[keyID, default: ([], now)].taken.insert(token)
            keys[keyID]!.lastNewAt = now
            return true
        }
    }

    /// Different tokens taken so far, over every key (a fleet sharing one token: 1).
    public var tokensTaken: Int { lock.withLock { keys.values.reduce(0) { $0 + $1.taken.count } } }
}

/// Token authentication on one connection, as APNs checks it: an ES256 JWT
/// whose `kid` names a key the simulator holds, signed by it, with a team id
/// as `iss`, issued no longer ago than the token lifetime; and no more than
/// one new token per connection per 20 minutes.
struct ProviderTokenCheck {
    /// Public keys by key id (`--auth-keys DIR`: `<KID>.pem`).
    let keys: [String: PublicKey]
    let lifetimeSeconds: Int64
    /// The rule across connections, when the simulator plays it.
    let registry: ProviderTokenRegistry?
    /// Least time between two tokens on one connection.
    static let refreshSeconds: Int64 = 20 * 60
    private var current: (text: String, issuedAt: Int64, installedAt: Int64)?

    init(keys: [String: PublicKey], lifetimeSeconds: Int64, registry: ProviderTokenRegistry? = nil) {
        self.keys = keys
        self.lifetimeSeconds = lifetimeSeconds
        self.registry = registry
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
        if let registry, !registry.admit(token: token, keyID: claims.keyID, now: now) {
            return H2Reply(status: 429, reason: "TooManyProviderTokenUpdates")
        }
        current = (token, claims.issuedAt, now)
        return nil
    }
}
