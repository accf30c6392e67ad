/// The topic APNs requires for each push type of the HTTP/2 provider API:
/// the app's bundle id, with a suffix for some types (Apple, "Sending
/// notification requests to APNs", `apns-topic`).
public enum PushTopic {
    /// Push types whose topic carries a suffix, and the suffix.
    public static let suffixes: [(pushType: String, suffix: String)] = [
        ("voip", ".voip"),
        ("complication", ".complication"),
        ("fileprovider", ".pushkit.fileprovider"),
        ("liveactivity", ".push-type.liveactivity"),
        ("location", ".location-query"),
        ("pushtotalk", ".voip-ptt"),
        ("controls", ".push-type.controls"),
        ("widgets", ".push-type.widgets"),
    ]

    /// Push types APNs takes only with token authentication: a certificate's
    /// topics never include their suffix (reference §4: location is "token
    /// auth only").
    public static let tokenAuthenticationOnly: Set<String> = ["location"]

    /// The suffix `pushType` requires ("" when the bundle id itself is the topic).
    public static func suffix(for pushType: String) -> String {
        suffixes.first { $0.pushType == pushType }?.suffix ?? ""
    }

    /// The push type whose suffix `topic` ends with, if any. (`.voip-ptt`
    /// is tested before `.voip` would matter: suffixes match whole.)
    public static func pushType(suffixOf topic: String) -> String? {
        suffixes.first { topic.hasSuffix($0.suffix) }?.pushType
    }

    /// What a job's topic means for `pushType`.
    public enum Resolution: Equatable, Sendable {
        /// The topic to send: the bundle id with the suffix added, or as given when it had it.
        case topic(String)
        /// The topic ends with the suffix of another push type.
        case otherTypesSuffix(pushType: String)
    }

    public static func resolve(_ topic: String, for pushType: String) -> Resolution {
        let wanted = suffix(for: pushType)
        if let other = Self.pushType(suffixOf: topic) {
            return other == pushType ? .topic(topic) : .otherTypesSuffix(pushType: other)
        }
        return .topic(topic + wanted)
    }
}
