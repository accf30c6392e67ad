/// Broadcast push (iOS 18 Live Activity channels): the facts of
/// `../shared/reference/apns-broadcast.md` that the sender, `campaign
/// channels` and the simulator share. Pure: no I/O.
public enum Broadcast {
    /// The largest broadcast body APNs takes (§2): one more byte is 413 PayloadTooLarge.
    public static let maxPayloadBytes = 5120
    /// Channels an app may have per environment (§1); one more is CannotCreateChannelConfig.
    public static let channelLimit = 10_000
    /// `apns-push-type` on a broadcast (Apple's pages also write Liveactivity; a server takes any case).
    public static let pushType = "liveactivity"
    /// `push-type` in a create body.
    public static let channelPushType = "LiveActivity"

    /// The channel management API's host and port for an environment (§1).
    public static func managementGateway(environment: String) -> (host: String, port: Int)? {
        switch environment {
        case "production": ("api-manage-broadcast.push.apple.com", 2196)
        case "sandbox", "development": ("api-manage-broadcast.sandbox.push.apple.com", 2195)
        default: nil
        }
    }

    /// `POST` here creates a channel, `GET` reads one and `DELETE` deletes one (both name it in `apns-channel-id`).
    public static func channelsPath(bundleID: String) -> String { "/1/apps/\(bundleID)/channels" }
    /// `GET` here lists every live channel.
    public static func allChannelsPath(bundleID: String) -> String { "/1/apps/\(bundleID)/all-channels" }
    /// `POST` here sends one broadcast to the channel in `apns-channel-id`.
    public static func broadcastPath(bundleID: String) -> String { "/4/broadcasts/apps/\(bundleID)" }

    /// A channel's `message-storage-policy` (§1), fixed when it is created.
    public enum StoragePolicy: Int, Sendable, CaseIterable {
        /// Nothing kept for offline devices; every broadcast's `apns-expiration` must be 0.
        case noneStored = 0
        /// The newest message kept up to 8 hours.
        case mostRecent = 1

        /// `none` / `most-recent`, as `campaign channels create --storage` takes it.
        public init?(name: String) {
            switch name {
            case "none", "0": self = .noneStored
            case "most-recent", "1": self = .mostRecent
            default: return nil
            }
        }

        public var name: String { self == .noneStored ? "none" : "most-recent" }
    }

    /// The class of a management or broadcast error (§3): what the caller must do.
    public enum AnswerClass: Equatable, Sendable {
        /// R: the request is wrong; never resend it unchanged.
        case requestWrong
        /// A: a credential is wrong, expired or for something else.
        case credentials
        /// C: the account's state at Apple (the capability is off, the channel limit is reached).
        case accountState
        /// S: the channel is gone or unknown; stop using it.
        case channelGone
        /// T: the server's trouble; retry after a backoff.
        case transient

        /// §3's table; a reason it lacks is classed by its status (4xx R, 429 and 5xx T).
        public init(status: Int, reason: APNsReason?) {
            switch reason {
            case .featureNotEnabled?, .cannotCreateChannelConfig?: self = .accountState
            case .channelNotRegistered?: self = .channelGone
            case .badCertificate?, .badCertificateEnvironment?, .topicMismatch?, .missingProviderToken?,
                 .expiredProviderToken?, .invalidProviderToken?, .tooManyProviderTokenUpdates?, .forbidden?:
                self = .credentials
            case .tooManyRequests?, .internalServerError?, .serviceUnavailable?, .shutdown?: self = .transient
            default:
                switch status {
                case 403: self = .credentials
                case 429, 500...599: self = .transient
                default: self = .requestWrong
                }
            }
        }
    }
}

/// A broadcast channel's id: the base64 text APNs made up when the channel
/// was created (§1: any length; you cannot choose it). Plans and journals
/// keep its bytes where a device token's go, so de-duplication, sharding and
/// the dead-channel store work as for devices; only canonical base64 (the
/// text ``base64`` gives back) is taken, so the bytes always turn back into
/// exactly the id APNs issued.
public struct ChannelID: Hashable, Sendable, CustomStringConvertible {
    /// Longest id taken, in bytes: 4,096 characters of base64. Apple's
    /// management page says not to assume the id's size, so the bound is only
    /// a guard against a runaway answer, far past any id seen.
    public static let maxBytes = 3072

    public var bytes: [UInt8]

    public init(bytes: [UInt8]) { self.bytes = bytes }

    /// Why a text is not a channel id.
    public enum Problem: Equatable, Sendable, CustomStringConvertible {
        /// Empty, or not canonical padded base64.
        case notBase64
        /// Base64 of more than ``maxBytes`` bytes.
        case tooLong(bytes: Int)

        public var description: String {
            switch self {
            case .notBase64: "not base64 as APNs issues channel ids"
            case .tooLong(let n): "\(n) bytes, more than the \(ChannelID.maxBytes) (4,096 characters) campaign takes"
            }
        }
    }

    /// Why `text` is not a channel id, or nil when it is one.
    public static func problem(with text: some StringProtocol) -> Problem? {
        let trimmed = Array(text.utf8.drop { $0 == 0x20 || $0 == 0x09 }.reversed().drop { $0 == 0x20 || $0 == 0x09 }.reversed())
        guard let bytes = Base64.decodeCanonical(trimmed), !bytes.isEmpty else { return .notBase64 }
        return bytes.count > maxBytes ? .tooLong(bytes: bytes.count) : nil
    }

    /// The id in `text` (spaces around it ignored), or nil when it is not canonical base64 of 1 to ``maxBytes`` bytes.
    public init?(base64 text: some StringProtocol) {
        let trimmed = Array(text.utf8.drop { $0 == 0x20 || $0 == 0x09 }.reversed().drop { $0 == 0x20 || $0 == 0x09 }.reversed())
        guard let bytes = Base64.decodeCanonical(trimmed), !bytes.isEmpty, bytes.count <= Self.maxBytes else { return nil }
        self.bytes = bytes
    }

    public var base64: String { String(decoding: Base64.encode(bytes), as: UTF8.self) }

    public var description: String { base64 }
}

/// Standard base64 (RFC 4648 §4, with padding).
public enum Base64 {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in alphabet.enumerated() { table[Int(c)] = UInt8(i) }
        return table
    }()

    public static func encode(_ bytes: some Collection<UInt8>) -> [UInt8] {
        let input = Array(bytes)
        var out = [UInt8](repeating: 0, count: encodedCount(input.count))
        _ = input.withUnsafeBufferPointer { b in out.withUnsafeMutableBufferPointer { write(b, to: $0) } }
        return out
    }

    /// Writes `bytes` as base64 at `out`, which has room for ``encodedCount(_:)``
    /// characters; the characters written. No allocation: a request header's value per broadcast.
    public static func write(_ bytes: UnsafeBufferPointer<UInt8>, to out: UnsafeMutableBufferPointer<UInt8>) -> Int {
        let n = encodedCount(bytes.count)
        guard out.count >= n else { return 0 }
        var o = 0, i = 0
        alphabet.withUnsafeBufferPointer { table in
            while i < bytes.count {
                let a = bytes[i], b: UInt8? = i + 1 < bytes.count ? bytes[i + 1] : nil, c: UInt8? = i + 2 < bytes.count ? bytes[i + 2] : nil
                out[o] = table[Int(a >> 2)]
                out[o + 1] = table[Int((a & 0x03) << 4 | (b ?? 0) >> 4)]
                out[o + 2] = b.map { table[Int(($0 & 0x0F) << 2 | (c ?? 0) >> 6)] } ?? UInt8(ascii: "=")
                out[o + 3] = c.map { table[Int($0 & 0x3F)] } ?? UInt8(ascii: "=")
                o += 4
                i += 3
            }
        }
        return n
    }

    /// The characters ``encode(_:)`` writes for `byteCount` bytes.
    public static func encodedCount(_ byteCount: Int) -> Int { (byteCount + 2) / 3 * 4 }

    /// The bytes of `text`, or nil unless it is base64 exactly as ``encode(_:)`` writes it
    /// (padded to a multiple of 4, no other characters, unused bits zero).
    public static func decodeCanonical(_ text: [UInt8]) -> [UInt8]? {
        guard !text.isEmpty, text.count % 4 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(text.count / 4 * 3)
        var i = 0
        while i < text.count {
            let last = i + 4 == text.count
            let pad = last ? (text[i + 3] == UInt8(ascii: "=") ? (text[i + 2] == UInt8(ascii: "=") ? 2 : 1) : 0) : 0
            var quad: UInt32 = 0
            for k in 0..<4 {
                let v: UInt8
                if k >= 4 - pad { v = 0 } else {
                    v = values[Int(text[i + k])]
                    guard v != 0xFF else { return nil }
                }
                quad = quad << 6 | UInt32(v)
            }
            out.append(UInt8(quad >> 16))
            if pad < 2 { out.append(UInt8(quad >> 8 & 0xFF)) }
            if pad < 1 { out.append(UInt8(quad & 0xFF)) }
            i += 4
        }
        // Canonical: encoding the bytes gives the text back (no stray bits under the padding).
        return encode(out) == text ? out : nil
    }
}
