"""The fleet of a trainer's own policy servers, named by a rollout request (service/policy/
named.py): asked, never told.

The trainer owns those servers and updates their weights between its steps; the service must
not pause, load, tag or take them out for serving another version than its own. So a server is
asked what it serves (`/weight_info`, where it has the route) and whatever it says is taken as
it is; each token's version is the engine's own tag for it (its `weight_versions` spans, where
it reports them, a decimal tag such as a trainer's global step), else the tag the server
reported when last asked, else 0. Routing, sticky sessions, retries and cool-downs after faults
are the policy client's, as for the service's own servers.
"""

from __future__ import annotations

from service.policy.fleet import PolicyFleet
from service.policy.servers import ServerState, parse_version


class FollowerFleet(PolicyFleet):
    follows = True

    async def _adopt(self, s: ServerState, tag: str | None) -> None:
        # Not "managed": no control request (pause, load, tag) is ever sent to it.
        s.managed = False
        self._set_version(s, parse_version(tag))

    async def _readmit(self, s: ServerState) -> None:
        # Nothing takes a follower's server out of rotation; a fault only cools it down.
        return None
