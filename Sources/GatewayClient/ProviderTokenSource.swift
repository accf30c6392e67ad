#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import CampaignJSON
import CampaignTLS
import ByteStreams

/// The one provider token all of a send's connections use: made from the
/// `.p8` key, renewed after 50 minutes and never within 20 (APNs answers a
/// token renewed more often with 429 TooManyProviderTokenUpdates).
///
/// It is kept in a file (0600) beside a lock: the journal's, so a `--resume`
/// soon after reuses it, or a directory shared by a fleet of processes
/// (`--token-cache DIR`, one file per key), so that 16 parts of a campaign
/// send one token instead of signing 16. Whoever needs a token takes the
/// lock, reads the file, and signs only when the file's token is too old
/// (50 minutes, or 20 when APNs called it expired); it then writes it there
/// atomically. The others pick it up the next time theirs is due. Without a
/// file (`campaign channels`, whose runs are short) it is kept in memory.
public final class ProviderTokenSource: @unchecked Sendable {
    package static let cacheName = "provider-token.json"
    public static let renewAfter: Int64 = 50 * 60
    package static let keepAtLeast: Int64 = 20 * 60
    /// How long a process waits for another's signing before signing itself:
    /// a signing takes milliseconds; a holder stopped for longer must not stop the send.
    package static let lockWaitSeconds = 5.0

    private let key: PrivateKey
    private let keyID: String
    private let teamID: String
    private let cachePath: String?
    private let lock = Lock()
    private var token: ProviderToken
    /// Tokens this process signed (a fleet sharing a cache signs one between them).
    public private(set) var signed = 0

    /// The file a shared directory keeps `keyID`'s token in.
    public static func sharedCachePath(directory: String, keyID: String) -> String {
        "\(directory)/provider-token-\(keyID.filter { $0.isLetter || $0.isNumber }).json"
    }

    /// `cachePath` nil: the token is kept in memory only.
    public init(keyPath: String, keyID: String, teamID: String, cachePath: String? = nil, now: Int64 = ProviderTokenSource.now()) throws(TLSError) {
        key = try PrivateKey.load(pemFile: keyPath, passphrase: nil)
        guard ProviderToken.isProviderTokenKey(key) else { throw TLSError(.notAProviderTokenKey(path: keyPath)) }
        self.keyID = keyID
        self.teamID = teamID
        self.cachePath = cachePath
        token = ProviderToken(keyID: keyID, teamID: teamID, issuedAt: 0, text: "")
        try refresh(now: now) { cached in now - cached.issuedAt < Self.renewAfter }
    }

    /// The wall clock's whole seconds (callers that test give their own `now`).
    public static func now() -> Int64 { Int64(SystemClock.shared.wallSeconds) }

    /// The token to send now: renewed once it is 50 minutes old (by this
    /// process, or by another on the same cache: then read from there).
    public func current(now: Int64 = ProviderTokenSource.now()) -> ProviderToken {
        lock.lock()
        defer { lock.unlock() }
        if now - token.issuedAt >= Self.renewAfter {
            try? refresh(now: now) { cached in now - cached.issuedAt < Self.renewAfter }
        }
        return token
    }

    /// APNs called `used` expired: the cache's newer token if another process
    /// renewed it, else a new one, unless the current one is younger than 20
    /// minutes (then the same is sent again).
    package func expired(_ used: ProviderToken, now: Int64 = ProviderTokenSource.now()) -> ProviderToken {
        lock.lock()
        defer { lock.unlock() }
        guard token.text == used.text else { return token }
        try? refresh(now: now) { cached in
            (cached.text != used.text && now - cached.issuedAt < Self.renewAfter) || now - cached.issuedAt < Self.keepAtLeast
        }
        return token
    }

    /// APNs refused `used` as one token update too many: the cache's token
    /// when another process made a different one (APNs took that one), else
    /// `used` again; never a new signing, which would only be refused too.
    package func refusedAsTooManyUpdates(_ used: ProviderToken, now: Int64 = ProviderTokenSource.now()) -> ProviderToken {
        lock.lock()
        defer { lock.unlock() }
        guard let cachePath, let cached = Self.load(cachePath), cached.keyID == keyID, cached.teamID == teamID,
              cached.text != used.text, now - cached.issuedAt < Self.renewAfter, ProviderToken.verify(cached.text, key: key) else { return token }
        token = cached
        return token
    }

    /// The key id the tokens name.
    package var keyIdentifier: String { keyID }

    /// Under the cache's lock: the cached token when `usable` says so, else a
    /// new one, written back. Called with `lock` held (or from `init`).
    private func refresh(now: Int64, usable: (ProviderToken) -> Bool) throws(TLSError) {
        let fileLock = cachePath.map { FileLock(path: "\($0).lock", waitSeconds: Self.lockWaitSeconds) }
        defer { fileLock?.unlock() }
        // Without a file, the token held is the one to judge.
        let candidate = cachePath.map(Self.load) ?? (token.text.isEmpty ? nil : token)
        if let cached = candidate, cached.keyID == keyID, cached.teamID == teamID,
           usable(cached), cached.text == token.text || ProviderToken.verify(cached.text, key: key) {
            token = cached
            return
        }
        token = try ProviderToken(keyID: keyID, teamID: teamID, issuedAt: now, key: key)
        signed += 1
        save()
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

/// An exclusive `flock` on a file (created 0600), waited for at most
/// `waitSeconds`: past that the caller goes on without it (the holder is
/// stuck; a send must not be). Works across processes, and across machines
/// on a file system with shared locks (NFSv4, CephFS).
package final class FileLock {
    private var fd: Int32

    package init(path: String, waitSeconds: Double) {
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        let deadline = ProviderTokenSource.monotonic() + waitSeconds
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK || errno == EINTR, ProviderTokenSource.monotonic() < deadline else {
                close(fd)
                fd = -1
                return
            }
            usleep(5_000)
        }
    }

    package func unlock() {
        guard fd >= 0 else { return }
        flock(fd, LOCK_UN)
        close(fd)
        fd = -1
    }

    deinit { unlock() }
}

extension ProviderTokenSource {
    package static func monotonic() -> Double { Double(SystemClock.shared.now) / 1e9 }
}
