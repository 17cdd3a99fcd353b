"""The child of tests/integrations/test_conversation_store_crash.py: saves conversations until it is
killed, printing each save only once ``save`` has returned (acknowledged) as ``cid n`` (n: the
messages that conversation then holds), flushed, so the parent knows what was acknowledged."""

from __future__ import annotations

import asyncio
import random
import sys

from pydantic_ai import messages as pm
from pydantic_ai.conversation import Conversation

from tplog.integrations.pydantic_ai import TplogConversationStore


async def main(path: str, seed: int) -> None:
    rng = random.Random(seed)
    async with TplogConversationStore(path) as cs:
        print("ready", flush=True)
        while True:
            cid = f"c{rng.randrange(8)}"
            conv = await cs.load(cid) or Conversation(conversation_id=cid)
            conv.messages += [pm.ModelRequest.user_text_prompt("q" * rng.randrange(1, 4000)),
                              pm.ModelResponse(parts=[pm.TextPart("a" * rng.randrange(1, 4000))])]
            await cs.save(conv)
            print(cid, len(conv.messages), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
