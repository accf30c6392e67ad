import ArgumentParser

/// The `campaign` command: lists the subcommands, does nothing itself.
public struct Campaign: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "campaign",
        abstract: "Bulk push-notification campaigns to Apple devices over APNs: the HTTP/2 provider API, and the legacy binary interface.",
        discussion: """
        Stages: plan an audience export into notifications (`plan`, checked with \
        `validate`), send them over parallel TLS connections with a resumable journal \
        (`send`; HTTP/2 with a provider token or certificate, sized to the distance \
        from Apple), stop one for good (`cancel`), tell how far a send got (`status`) and what \
        each variant did against the holdout (`results`); check the set-up first (`doctor`). `channels` manages \
        broadcast channels for Live Activities. `feedback` keeps the \
        suppression store; `simulator` runs a local APNs (both protocols) for \
        testing, `certs` writes development certificates for it, and `token` \
        prints a provider token.
        """,
        version: "0.1.0",
        subcommands: [Plan.self, Validate.self, Send.self, Cancel.self, Status.self, Results.self, Doctor.self, Channels.self, Feedback.self, Ledger.self, Certs.self, Simulator.self, Token.self]
    )

    public init() {}
}
