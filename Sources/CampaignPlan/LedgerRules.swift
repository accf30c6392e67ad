import SendLedger

/// The campaign rules a plan applies with `--ledger`: once per campaign
/// (unless `--allow-repeat`) and the job's `frequencyCap`, against what the
/// send ledger says of each device (read once, before the rows).
public struct LedgerRules: Sendable {
    public var view: LedgerView
    public var cap: FrequencyCap?
    public var allowRepeat: Bool
    public var campaign: String

    public init(view: LedgerView, campaign: String, cap: FrequencyCap?, allowRepeat: Bool) {
        (self.view, self.campaign, self.cap, self.allowRepeat) = (view, campaign, cap, allowRepeat)
    }

    /// Reads the ledger directory for `campaign` and `cap` at `now`.
    public static func load(directory: String, campaign: String, cap: FrequencyCap?, allowRepeat: Bool, now: UInt32) throws -> LedgerRules {
        let view = try LedgerReader.load(directory: directory, filter: .init(campaign: allowRepeat ? "" : campaign, cap: cap, now: now))
        return LedgerRules(view: view, campaign: campaign, cap: cap, allowRepeat: allowRepeat)
    }

    /// Starts loading what ``verdict(_:)`` will read for `token` (the planner asks a few rows ahead).
    @inline(__always)
    func prefetch(_ token: UnsafeBufferPointer<UInt8>) {
        if !view.isEmpty { view.prefetch(LedgerFormat.tokenHash(token)) }
    }

    /// Why the device of `token` is dropped, or nil to plan it.
    @inline(__always)
    func verdict(_ token: UnsafeBufferPointer<UInt8>) -> (RejectCode, String)? {
        if view.isEmpty { return nil }
        let flags = view.flags(LedgerFormat.tokenHash(token))
        if flags == 0 { return nil }
        if !allowRepeat, flags & LedgerView.reachedBit != 0 {
            return (.alreadySent, "already sent: the ledger shows campaign \(campaign) reached this device (plan --allow-repeat to send again)")
        }
        if let cap, Int(flags & 0x7F) >= cap.max {
            return (.frequencyCapped, "frequency capped: \(flags & 0x7F) notification\(flags & 0x7F == 1 ? "" : "s") of scope \(cap.scope) in the last \(capWindowText(cap.perSeconds)), the cap is \(cap.max)")
        }
        return nil
    }
}

func capWindowText(_ seconds: Int) -> String {
    if seconds % 86_400 == 0 { return "\(seconds / 86_400) d" }
    if seconds % 3600 == 0 { return "\(seconds / 3600) h" }
    return "\(seconds / 60) min"
}
