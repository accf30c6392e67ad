import ArgumentParser

/// The `campaign` command: lists the subcommands, does nothing itself.
public struct Campaign: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "campaign",
        abstract: "Bulk push-notification campaigns over the APNs binary provider interface.",
        discussion: """
        Stages: plan an audience into notifications, send them over parallel TLS \
        connections, read the feedback service. `campaign simulator` runs a local \
        gateway for testing; `campaign certs` writes development certificates for it.
        """,
        version: "0.1.0",
        subcommands: [Plan.self, Validate.self, Send.self, Status.self, Feedback.self, Certs.self, Simulator.self, Token.self]
    )

    public init() {}
}
