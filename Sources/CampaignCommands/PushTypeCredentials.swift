import APNSWire

/// Push types a certificate cannot send: told by `validate`, and refused by
/// `send` once the plan's header is read and before anything connects (APNs
/// would refuse every request, and the journal would hold only failures).
enum PushTypeCredentials {
    /// Why a plan of `pushType` cannot be sent with these credentials, or nil when it can.
    static func refusal(pushType: String, tokenAuthentication: Bool) -> String? {
        guard !tokenAuthentication, PushTopic.tokenAuthenticationOnly.contains(pushType) else { return nil }
        return "\(pushType) pushes need token authentication (--auth-key, --key-id and --team-id): APNs refuses them over a certificate."
    }
}
