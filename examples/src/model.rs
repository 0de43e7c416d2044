//! Organizations, teams and their memberships as configured at the fake, plus the switches
//! that make the API misbehave the way github.com does (rate limits, outages).

use std::fmt;

/// The state of an organization or team membership, as GitHub reports it.
///
/// A `pending` membership is an invitation that has not been accepted: GitHub returns it from
/// the membership endpoints (`"state": "pending"`) but the person is not a member yet — it is
/// not listed by `GET /user/orgs` or `GET /user/teams` and grants nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MembershipState {
    Active,
    Pending,
}

impl MembershipState {
    /// `"active"` or `"pending"`, GitHub's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            MembershipState::Active => "active",
            MembershipState::Pending => "pending",
        }
    }

    /// Parses GitHub's spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(MembershipState::Active),
            "pending" => Some(MembershipState::Pending),
            _ => None,
        }
    }
}

impl fmt::Display for MembershipState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A person's role in an organization (`"admin"` is an owner).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OrgRole {
    Member,
    Admin,
}

impl OrgRole {
    /// `"member"` or `"admin"`, GitHub's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OrgRole::Member => "member",
            OrgRole::Admin => "admin",
        }
    }

    /// Parses GitHub's spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "member" => Some(OrgRole::Member),
            "admin" => Some(OrgRole::Admin),
            _ => None,
        }
    }
}

/// A person's role in a team.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TeamRole {
    Member,
    Maintainer,
}

impl TeamRole {
    /// `"member"` or `"maintainer"`, GitHub's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TeamRole::Member => "member",
            TeamRole::Maintainer => "maintainer",
        }
    }

    /// Parses GitHub's spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "member" => Some(TeamRole::Member),
            "maintainer" => Some(TeamRole::Maintainer),
            _ => None,
        }
    }
}

/// `closed` teams are visible to every member of the organization; `secret` teams only to
/// their own members and the organization's owners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TeamPrivacy {
    Closed,
    Secret,
}

impl TeamPrivacy {
    pub fn as_str(self) -> &'static str {
        match self {
            TeamPrivacy::Closed => "closed",
            TeamPrivacy::Secret => "secret",
        }
    }
}

/// One person's membership of an organization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeOrgMember {
    pub login: String,
    pub state: MembershipState,
    pub role: OrgRole,
    /// A publicized membership is listed by `GET /users/{username}/orgs`; a private one is
    /// seen only through the person's own token (`GET /user/orgs` and the membership API).
    pub public: bool,
}

impl FakeOrgMember {
    /// An active, private membership with the `member` role.
    pub fn active(login: impl Into<String>) -> Self {
        Self {
            login: login.into(),
            state: MembershipState::Active,
            role: OrgRole::Member,
            public: false,
        }
    }

    /// An invitation not yet accepted.
    pub fn pending(login: impl Into<String>) -> Self {
        Self {
            state: MembershipState::Pending,
            ..Self::active(login)
        }
    }

    pub fn role(mut self, role: OrgRole) -> Self {
        self.role = role;
        self
    }

    pub fn public(mut self, public: bool) -> Self {
        self.public = public;
        self
    }
}

/// An organization known to the fake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeOrg {
    pub id: u64,
    pub login: String,
    pub members: Vec<FakeOrgMember>,
    /// SAML single sign-on is enforced: a token reaches the organization's resources only once
    /// it is SSO-authorized for it (see [`crate::FakeGitHub::sso_authorize_user`]).
    pub sso_enforced: bool,
}

impl FakeOrg {
    pub fn new(id: u64, login: impl Into<String>) -> Self {
        Self {
            id,
            login: login.into(),
            members: Vec::new(),
            sso_enforced: false,
        }
    }

    /// Adds (or replaces) a membership.
    pub fn with(mut self, member: FakeOrgMember) -> Self {
        self.members
            .retain(|m| !m.login.eq_ignore_ascii_case(&member.login));
        self.members.push(member);
        self
    }

    /// An active, private member.
    pub fn member(self, login: impl Into<String>) -> Self {
        self.with(FakeOrgMember::active(login))
    }

    /// An active member whose membership is public.
    pub fn public_member(self, login: impl Into<String>) -> Self {
        self.with(FakeOrgMember::active(login).public(true))
    }

    /// An active owner.
    pub fn admin(self, login: impl Into<String>) -> Self {
        self.with(FakeOrgMember::active(login).role(OrgRole::Admin))
    }

    /// A pending invitation.
    pub fn pending(self, login: impl Into<String>) -> Self {
        self.with(FakeOrgMember::pending(login))
    }

    /// Enforces SAML SSO for this organization.
    pub fn sso_enforced(mut self) -> Self {
        self.sso_enforced = true;
        self
    }
}

/// One person's membership of a team.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeTeamMember {
    pub login: String,
    pub state: MembershipState,
    pub role: TeamRole,
}

/// A team of an organization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeTeam {
    /// The organization's login.
    pub org: String,
    pub slug: String,
    pub id: u64,
    pub name: String,
    pub privacy: TeamPrivacy,
    pub members: Vec<FakeTeamMember>,
}

impl FakeTeam {
    /// A `closed` team without members.
    pub fn new(
        org: impl Into<String>,
        slug: impl Into<String>,
        id: u64,
        name: impl Into<String>,
    ) -> Self {
        Self {
            org: org.into(),
            slug: slug.into(),
            id,
            name: name.into(),
            privacy: TeamPrivacy::Closed,
            members: Vec::new(),
        }
    }

    /// Adds (or replaces) a membership.
    pub fn with(
        mut self,
        login: impl Into<String>,
        state: MembershipState,
        role: TeamRole,
    ) -> Self {
        let login = login.into();
        self.members
            .retain(|m| !m.login.eq_ignore_ascii_case(&login));
        self.members.push(FakeTeamMember { login, state, role });
        self
    }

    /// An active member.
    pub fn member(self, login: impl Into<String>) -> Self {
        self.with(login, MembershipState::Active, TeamRole::Member)
    }

    /// An active maintainer.
    pub fn maintainer(self, login: impl Into<String>) -> Self {
        self.with(login, MembershipState::Active, TeamRole::Maintainer)
    }

    /// A pending team membership (the person's organization invitation is not accepted yet).
    pub fn pending(self, login: impl Into<String>) -> Self {
        self.with(login, MembershipState::Pending, TeamRole::Member)
    }

    pub fn secret(mut self) -> Self {
        self.privacy = TeamPrivacy::Secret;
        self
    }
}

/// How the fake answers (or does not) — to simulate a GitHub outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reachability {
    /// Normal service.
    #[default]
    Up,
    /// Network failure: new connections are accepted and closed at once, open keep-alive
    /// connections are reset, so a client sees a transport error, never an HTTP status.
    Down,
    /// GitHub is up but failing: every request gets `503 Service Unavailable`.
    Unavailable,
    /// Connections are accepted and requests read, but no answer ever comes (a client's own
    /// timeout fires).
    Hang,
}

impl Reachability {
    pub(crate) fn to_u8(self) -> u8 {
        match self {
            Reachability::Up => 0,
            Reachability::Down => 1,
            Reachability::Unavailable => 2,
            Reachability::Hang => 3,
        }
    }

    pub(crate) fn from_u8(v: u8) -> Self {
        match v {
            1 => Reachability::Down,
            2 => Reachability::Unavailable,
            3 => Reachability::Hang,
            _ => Reachability::Up,
        }
    }

    /// `"up"`, `"down"`, `"unavailable"`, `"hang"`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "up" => Some(Reachability::Up),
            "down" => Some(Reachability::Down),
            "unavailable" => Some(Reachability::Unavailable),
            "hang" => Some(Reachability::Hang),
            _ => None,
        }
    }
}
