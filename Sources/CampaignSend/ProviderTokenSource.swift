#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import CampaignJSON
import CampaignTLS

/// The one provider token all of a send's connections use: made from the
/// `.p8` key, renewed after 50 minutes and never within 20 (APNs answers a
/// token renewed more often with 429 TooManyProviderTokenUpdates), and kept
/// with its `iat` in the journal directory (0600), so a `--resume` soon
/// after reuses it instead of making a new one. `campaign channels` uses one
/// too, kept nowhere (each run is short).
public final class ProviderTokenSource: @unchecked Sendable {
    static let cacheName = "provider-token.json"
    public static let renewAfter: Int64 = 50 * 60
    static let keepAtLeast: Int64 = 20 * 60

    private let key: PrivateKey
    private let keyID: String
    private let teamID: String
    private let cachePath: String?
    private let lock = Lock()
    private var token: ProviderToken

    /// `cachePath` nil: the token is kept in memory only.
    public init(keyPath: String, keyID: String, teamID: String, cachePath: String? = nil, now: Int64 = ProviderTokenSource.now()) throws(TLSError) {
        key = try PrivateKey.load(pemFile: keyPath, passphrase: nil)
        guard ProviderToken.isProviderTokenKey(key) else { throw TLSError(.notAProviderTokenKey(path: keyPath)) }
        self.keyID = keyID
        self.teamID = teamID
        self.cachePath = cachePath
        if let cachePath, let cached = Self.load(cachePath), cached.keyID == keyID, cached.teamID == teamID,
           now - cached.issuedAt < Self.renewAfter, ProviderToken.verify(cached.text, key: key) {
            token = cached
        } else {
            token = try ProviderToken(keyID: keyID, teamID: teamID, issuedAt: now, key: key)
            save()
        }
    }

    public static func now() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec)
    }

    /// The token to send now: renewed once it is 50 minutes old.
    public func current(now: Int64 = ProviderTokenSource.now()) -> ProviderToken {
        lock.lock()
        defer { lock.unlock() }
        if now - token.issuedAt >= Self.renewAfter { renew(now) }
        return token
    }

    /// APNs called `used` expired: a new token, unless the current one is
    /// newer than it or younger than 20 minutes (then the same is sent again).
    func expired(_ used: ProviderToken, now: Int64 = ProviderTokenSource.now()) -> ProviderToken {
        lock.lock()
        defer { lock.unlock() }
        if token.text == used.text, now - token.issuedAt >= Self.keepAtLeast { renew(now) }
        return token
    }

    private func renew(_ now: Int64) {
        if let fresh = try? ProviderToken(keyID: keyID, teamID: teamID, issuedAt: now, key: key) {
            token = fresh
            save()
        }
    }

    private func save() {
        guard let cachePath else { return }
        let value = JSONValue.object([("kid", .string(keyID)), ("team", .string(teamID)),
                                      ("iat", .number(String(token.issuedAt))), ("token", .string(token.text))])
        try? SecureFile.write(value.serialized() + [0x0A], to: cachePath, mode: SecureFile.privateMode)
    }

    private static func load(_ path: String) -> ProviderToken? {
        guard let bytes = try? readWholeFile(path, limit: 1 << 16), let v = try? JSONValue.parse(bytes),
              let kid = v["kid"]?.stringValue, let team = v["team"]?.stringValue,
              let iat = v["iat"]?.integerValue, let text = v["token"]?.stringValue else { return nil }
        return ProviderToken(keyID: kid, teamID: team, issuedAt: iat, text: text)
    }
}
